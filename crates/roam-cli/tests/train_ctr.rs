//! End-to-end runs of `roam train ctr`: synthetic Zipf clicks over 10^8-id fields in single mode
//! (one and two worker threads) and with 2 nodes × 1 worker in classic, classic-nolocal, lapse
//! and adapm. They check that the model learns (test AUC clearly above 0.5, loss falls in the
//! first epochs), that the 2-node runs' losses and AUCs are close to single's (the same model
//! trained asynchronously by two workers), that lapse serves more accesses locally than
//! classic, the report's fields, the MovieLens click data when `scripts/fetch-data.sh
//! ml-100k-ctr` has been run (skipped with a message otherwise), and that bad input fails with
//! a message naming it. Every run uses a fixed `--seed` and a seeded synthetic spec, printed
//! with the arguments on failure.

mod common;

use std::path::PathBuf;

use common::{epochs, fails, json_with, last_epoch, launch, losses, node_stats, run, scratch, sum};
use serde_json::Value;

/// Small enough for about a second per run; 10^8 ids per field, most of them seen once.
const SYNTHETIC: &str = "fields=6,ids=1e8,zipf=1.1,rows=30000,test=0.2,signal=2,seed=3";
const ARGS: [&str; 10] = [
    "--synthetic",
    SYNTHETIC,
    "--epochs",
    "2",
    "--seed",
    "5",
    "--lr",
    "0.02",
    "--batch",
    "128",
];

fn report(stdout: &str) -> Value {
    json_with(stdout, "app", "ctr")
}

/// The job's arguments: [`ARGS`], each option of `extra` replacing the one of the same name.
fn train(mode: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["train", "ctr", "--mode", mode]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for pair in ARGS.chunks(2) {
        if !extra.contains(&pair[0]) {
            args.extend(pair.iter().map(|s| s.to_string()));
        }
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn single(extra: &[&str]) -> Value {
    let args = train("single", extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    report(&run(&args))
}

fn two_nodes(mode: &str) -> Value {
    let args = train(mode, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    report(&launch(2, 1, &args))
}

/// The model learns: finite losses that fall, test AUC clearly above chance.
fn assert_learns(r: &Value) {
    let l = losses(r);
    assert!(l.iter().all(|x| x.is_finite()), "{l:?}: {r}");
    assert!(l[1] < l[0], "loss did not fall: {l:?}: {r}");
    let auc = last_epoch(r, "test_auc");
    assert!(auc > 0.65, "test AUC {auc} is not clearly above 0.5: {r}");
    let oracle = r["settings"]["oracle_test_auc"].as_f64().expect("oracle");
    assert!(auc < oracle, "AUC {auc} above the hidden model's {oracle}");
}

#[test]
fn single_mode_learns_the_synthetic_clicks_and_reports_every_field() {
    let r = single(&[]);
    assert_learns(&r);
    assert_eq!(r["settings"]["metric"], "test_auc");
    assert_eq!(r["settings"]["optimizer"], "adagrad");
    assert_eq!(r["settings"]["train_rows"], 24000);
    for e in epochs(&r) {
        for field in [
            "seconds",
            "loss",
            "test_auc",
            "test_logloss",
            "rows_per_second",
            "cpu_seconds",
            "local_fraction",
        ] {
            assert!(e[field].as_f64().is_some(), "{field} missing in {e}");
        }
        assert_eq!(e["local_fraction"].as_f64(), Some(1.0), "{e}");
    }
    assert!(r["bytes_sent"].as_u64().is_some(), "{r}");
}

#[test]
fn two_workers_in_one_process_learn_like_one() {
    let one = single(&[]);
    let two = single(&["--workers", "2"]);
    assert_eq!(two["workers_per_node"], 2);
    assert_learns(&two);
    let (a, b) = (last_epoch(&one, "test_auc"), last_epoch(&two, "test_auc"));
    assert!((a - b).abs() < 0.02, "AUC 1 worker {a}, 2 workers {b}");
}

/// Two nodes train the same model as one node, asynchronously: every epoch's loss within
/// 0.03 of single's and the final AUC within 0.02 (adapm: only the AUC, within 0.03; the nups
/// modes: only the AUC, within 0.02).
///
/// The nups modes replicate the dense keys, which then take one optimizer step per sync round
/// at their hub with the round's summed gradients instead of one per batch: the training loss
/// falls more slowly (epoch 2: 0.52 against single's 0.38 in one run) while the test AUC stays
/// as good (0.727 against 0.712).
///
/// adapm's loss is not compared: when both nodes signal intents for the same hot row, roam
/// replicates it (a share); the share's gradients go to the owner, and the share is read as of
/// its last sync, so hot rows are read staler than in the other modes (epoch 2's online loss
/// was 0.42–0.52 against single's 0.36; `adapm-relocate-only`, compared here, 0.38).
#[test]
fn two_nodes_in_every_mode_learn_like_single() {
    let base = single(&[]);
    let base_losses = losses(&base);
    let base_auc = last_epoch(&base, "test_auc");
    let mut local = Vec::new();
    for mode in [
        "classic",
        "classic-nolocal",
        "lapse",
        "nups",
        "nups-replicate-only",
        "adapm-relocate-only",
        "adapm",
    ] {
        let r = two_nodes(mode);
        assert_eq!(r["nodes"], 2, "{r}");
        eprintln!(
            "{mode}: losses {:?}, AUC {}, local {}, replication {}",
            losses(&r),
            last_epoch(&r, "test_auc"),
            last_epoch(&r, "local_fraction"),
            r["settings"]["replication"]
        );
        if mode.starts_with("nups") {
            // The dense keys and the hot rows, the same on both nodes (checked by the job).
            let rep = &r["settings"]["replication"];
            let dense = r["settings"]["dense_keys"].as_u64().expect("dense_keys");
            let rows = rep["replicated_rows"].as_u64().expect("replicated_rows");
            assert_eq!(rep["replicated_keys"].as_u64(), Some(dense + rows), "{rep}");
            assert!(rows > 0, "{rep}");
            let share = rep["access_fraction"].as_f64().expect("access_fraction");
            assert!(share > 0.0 && share < 1.0, "{rep}");
            assert!(rep["rounds_per_node"].as_f64() > Some(0.0), "{rep}");
        } else {
            assert!(r["settings"]["replication"].is_null(), "{r}");
        }
        assert_learns(&r);
        for (e, (a, b)) in base_losses.iter().zip(losses(&r)).enumerate() {
            assert!(
                mode == "adapm" || mode.starts_with("nups") || (a - b).abs() < 0.03,
                "{mode} epoch {}: loss {b}, single {a}",
                e + 1
            );
        }
        let auc = last_epoch(&r, "test_auc");
        let tolerance = if mode == "adapm" { 0.03 } else { 0.02 };
        assert!(
            (auc - base_auc).abs() < tolerance,
            "{mode}: AUC {auc}, single {base_auc}"
        );
        if mode.starts_with("adapm") {
            assert!(r["intents"].is_object(), "{r}");
        }
        if mode == "lapse" || mode == "nups" {
            // The default: each node's own rows (no other node trains them) moved there once,
            // before training, and nothing moved after.
            assert_eq!(r["settings"]["localize"], "exclusive", "{r}");
            let own: Vec<u64> = r["settings"]["exclusive_rows"]
                .as_array()
                .expect("exclusive_rows")
                .iter()
                .map(|n| n.as_u64().unwrap())
                .collect();
            assert_eq!(own.len(), 2, "{r}");
            assert!(own.iter().all(|&n| n > 0), "{r}");
            let moved = r["relocations"].as_u64().expect("relocations");
            assert!(
                moved > 0 && moved <= own.iter().sum::<u64>(),
                "{mode}: {moved} relocations for {own:?} own rows"
            );
            // Nothing moves during the epochs: one epoch fewer moves exactly as many rows.
            let args = train(mode, &["--epochs", "1"]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let shorter = report(&launch(2, 1, &args));
            assert_eq!(
                shorter["relocations"].as_u64(),
                Some(moved),
                "{mode}: {shorter}"
            );
        }
        local.push((mode, last_epoch(&r, "local_fraction")));
    }
    let of = |m: &str| {
        local
            .iter()
            .find(|(n, _)| *n == m)
            .map(|(_, f)| *f)
            .unwrap()
    };
    assert_eq!(of("classic-nolocal"), 0.0, "{local:?}");
    assert!(of("lapse") > of("classic"), "{local:?}");
    // Replicas are local: the same static placement reads more of its keys here with them.
    assert!(of("nups-replicate-only") > of("classic"), "{local:?}");
}

/// `--shard-by f0`: all rows with one f0 id go to one worker, so every f0 row is one node's
/// own: each node owns more rows than when rows are dealt out one by one, and the model learns
/// as well.
#[test]
fn sharding_by_a_field_gives_each_node_more_rows_of_its_own() {
    let own = |extra: &[&str]| -> (Value, u64) {
        let args = train("nups", extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = report(&launch(2, 1, &args));
        let rows = r["settings"]["exclusive_rows"]
            .as_array()
            .expect("exclusive_rows")
            .iter()
            .map(|n| n.as_u64().unwrap())
            .sum();
        (r, rows)
    };
    let (dealt, dealt_rows) = own(&[]);
    let (sharded, sharded_rows) = own(&["--shard-by", "f0"]);
    assert_eq!(dealt["settings"]["shard_by"], Value::Null, "{dealt}");
    assert_eq!(sharded["settings"]["shard_by"], "f0", "{sharded}");
    assert!(
        sharded_rows > dealt_rows,
        "own rows: {sharded_rows} sharded by f0, {dealt_rows} dealt"
    );
    assert_learns(&sharded);
    let (a, b) = (
        last_epoch(&dealt, "test_auc"),
        last_epoch(&sharded, "test_auc"),
    );
    assert!((a - b).abs() < 0.02, "AUC {b} sharded, {a} dealt");
}

#[test]
fn adam_and_sgd_train_too() {
    for (opt, lr) in [("adam", "0.002"), ("sgd", "0.5")] {
        let r = single(&["--optimizer", opt, "--lr", lr]);
        assert_eq!(r["settings"]["optimizer"], opt);
        let auc = last_epoch(&r, "test_auc");
        assert!(auc > 0.6, "{opt}: AUC {auc}: {r}");
    }
}

#[test]
fn a_data_directory_in_the_tsv_format_trains() {
    let dir = scratch("ctr", "tsv");
    // Two fields, the second a bag; field 0's id decides the label. Every user is in both
    // splits (7 is prime to 50).
    let mut train = String::from("label\tuser\ttags\n");
    let mut test = train.clone();
    for i in 0..4000u64 {
        let user = i % 50;
        let line = format!("{}\t{user}\t{},{}\n", u8::from(user < 25), i % 7, i % 3);
        if i % 7 == 0 {
            test.push_str(&line);
        } else {
            train.push_str(&line);
        }
    }
    test.push_str("0\t9999\t\n"); // an unseen id and an empty bag
    std::fs::write(dir.join("train.tsv"), train).unwrap();
    std::fs::write(dir.join("test.tsv"), test).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let r = report(&run(&[
        "train", "ctr", "--mode", "single", "--data", &d, "--epochs", "2", "--seed", "1",
    ]));
    assert_eq!(r["settings"]["fields"], serde_json::json!(["user", "tags"]));
    let auc = last_epoch(&r, "test_auc");
    assert!(auc > 0.95, "a separable task: AUC {auc}: {r}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// MovieLens-100k as clicks (`scripts/fetch-data.sh ml-100k-ctr`), when it is there.
#[test]
fn movielens_clicks_when_fetched() {
    let dir = std::env::var_os("ROAM_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data"))
        .join("ml-100k-ctr");
    if !dir.join("train.tsv").is_file() {
        eprintln!(
            "skipping: {} is absent (scripts/fetch-data.sh ml-100k-ctr)",
            dir.display()
        );
        return;
    }
    let d = dir.to_string_lossy().into_owned();
    let r = report(&run(&[
        "train", "ctr", "--mode", "single", "--data", &d, "--epochs", "1", "--seed", "1",
    ]));
    assert_eq!(r["settings"]["train_rows"], 80000);
    let auc = last_epoch(&r, "test_auc");
    assert!(auc > 0.75, "MovieLens clicks: AUC {auc}: {r}");
}

#[test]
fn bad_input_fails_with_a_message() {
    let dir = scratch("ctr", "bad");
    std::fs::write(dir.join("train.tsv"), "label\ta\n1\t1\n3\t2\n").unwrap();
    std::fs::write(dir.join("test.tsv"), "label\ta\n1\t1\n").unwrap();
    let d = dir.to_string_lossy().into_owned();
    for (args, needle) in [
        (
            vec!["train", "ctr", "--mode", "nups", "--replicate-alpha", "inf"],
            "--replicate-alpha must be a finite number",
        ),
        (
            vec!["train", "ctr", "--mode", "single", "--optimizer", "rmsprop"],
            "--optimizer \"rmsprop\"",
        ),
        (
            vec!["train", "ctr", "--mode", "single", "--optimizer", "ftrl"],
            "FTRL",
        ),
        (
            vec!["train", "ctr", "--mode", "single", "--shard-by", "user"],
            "has no such field (its fields: f0, f1,",
        ),
        (
            vec![
                "train",
                "ctr",
                "--mode",
                "single",
                "--synthetic",
                "fields=0",
            ],
            "fields must be in",
        ),
        (
            vec![
                "train",
                "ctr",
                "--mode",
                "single",
                "--data",
                "/nonexistent/ctr",
            ],
            "not a directory",
        ),
        (
            vec!["train", "ctr", "--mode", "single", "--data", &d],
            "line 3: the label must be 0 or 1",
        ),
        (
            vec!["train", "ctr", "--mode", "single", "--lr", "0"],
            "--lr 0 must be > 0",
        ),
    ] {
        let err = fails(&args);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--checkpoint-dir`/`--resume`: 1 epoch with a checkpoint, then a resume to 2 epochs, gives
/// the uninterrupted 2-epoch run's second epoch bit for bit in single mode with one worker (no
/// asynchrony; the dense MLP and the optimizer state are roam keys, so they are in the
/// checkpoint); and a 2-node lapse checkpoint resumes on 3 nodes and keeps learning.
#[test]
fn a_resumed_run_continues_with_the_same_model_and_order() {
    let dir = scratch("ctr", "resume");
    let d = dir.to_str().unwrap();
    let figures = |r: &Value| -> Vec<(u64, u64, u64)> {
        epochs(r)
            .iter()
            .map(|e| {
                let bits = |k: &str| e[k].as_f64().unwrap().to_bits();
                (e["epoch"].as_u64().unwrap(), bits("loss"), bits("test_auc"))
            })
            .collect()
    };
    let full = single(&["--workers", "1", "--epochs", "2"]);
    single(&["--workers", "1", "--epochs", "1", "--checkpoint-dir", d]);
    let resumed = single(&["--workers", "1", "--epochs", "2", "--resume", d]);
    assert_eq!(figures(&resumed), figures(&full)[1..], "epoch 2: {resumed}");
    // Into another node count: 2 lapse nodes checkpoint, 3 resume.
    let lapse = |extra: &[&str]| -> Vec<String> { train("lapse", extra) };
    let first = lapse(&["--epochs", "1", "--checkpoint-dir", d]);
    launch(2, 1, &first.iter().map(String::as_str).collect::<Vec<_>>());
    let more = lapse(&["--epochs", "3", "--resume", d]);
    let more = report(&launch(
        3,
        1,
        &more.iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    assert_eq!(epochs(&more)[0]["epoch"].as_u64(), Some(2), "{more}");
    let l = losses(&more);
    assert!(
        l.len() == 2 && l[1] < l[0],
        "training goes on: {l:?}: {more}"
    );
    assert!(last_epoch(&more, "test_auc") > 0.65, "{more}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--max-rows` with `--spill-dir`: a per-node budget far below the keys the run creates gives
/// the unbounded run's figures bit for bit in single mode with one worker (the budget is a cache
/// over the spill file, which loses nothing), holding at most the budget; a budget without a
/// spill directory and bad budget values fail naming them.
#[test]
fn a_row_budget_over_a_spill_file_trains_the_same_model() {
    let dir = scratch("ctr", "spill");
    let d = dir.to_str().unwrap();
    let figures = |r: &Value| -> Vec<(u64, u64)> {
        epochs(r)
            .iter()
            .map(|e| {
                let bits = |k: &str| e[k].as_f64().unwrap().to_bits();
                (bits("loss"), bits("test_auc"))
            })
            .collect()
    };
    let full = single(&["--workers", "1"]);
    let budget = single(&["--workers", "1", "--max-rows", "2000", "--spill-dir", d]);
    assert_eq!(figures(&budget), figures(&full), "{budget}");
    assert!(dir.join("roam-spill-node-0.bin").exists());
    for (extra, needle) in [
        (vec!["--max-rows", "10"], "need --spill-dir"),
        (vec!["--max-bytes", "0", "--spill-dir", d], "at least 1"),
        (
            vec!["--max-bytes", "12parsecs", "--spill-dir", d],
            "unknown unit",
        ),
        (
            vec!["--max-rows", "1.5", "--spill-dir", d],
            "not a whole number",
        ),
    ] {
        let mut args = vec!["train", "ctr", "--mode", "single"];
        args.extend(extra);
        let err = fails(&args);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two `lapse` nodes under a row budget: each node uses the other's rows, which move in; one
/// clock lets go of the least recently used rows whoever created them (own rows evicted,
/// moved-in rows sent back to their creators), so every node ends within its budget, no access
/// is refused, no update dropped, and the model learns as unbounded runs do.
#[test]
fn two_lapse_nodes_under_a_row_budget_hold_it_and_drop_nothing() {
    let dir = scratch("ctr", "spill-lapse");
    let d = dir.to_str().unwrap();
    let max_rows = 1500;
    let budget = max_rows.to_string();
    let args = train("lapse", &["--max-rows", &budget, "--spill-dir", d]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = launch(2, 1, &args);
    let r = report(&out);
    assert_learns(&r);
    // Under a budget the default moves rows batch by batch, from their second sighting (a
    // node's own rows, moved before training, would mostly be evicted again).
    assert_eq!(r["settings"]["localize"], "repeats", "{r}");
    let stats = node_stats(&out);
    assert_eq!(stats.len(), 2, "{out}");
    for node in &stats {
        let held = node["keys_held"].as_u64().expect("keys_held");
        assert!(
            held <= max_rows,
            "a node holds {held} rows > {max_rows}: {node}"
        );
    }
    assert_eq!(sum(&stats, "rows_rejected"), 0, "{out}");
    assert_eq!(sum(&stats, "grads_dropped"), 0, "{out}");
    assert!(sum(&stats, "rows_evicted") > 0, "{out}");
    assert!(
        sum(&stats, "rows_returned") > 0,
        "moved-in rows go back: {out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
