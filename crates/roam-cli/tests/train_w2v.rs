//! End-to-end runs of `roam train w2v`: the Lapse toy text (`lapse-toy/lm/small.txt`, skipped
//! with a message when the shared data is absent) and a tiny synthetic corpus with planted
//! topics, each in single mode (one process) and with 2 nodes × 1 worker in every distributed
//! mode. They check that the loss falls, that the metric beats random embeddings (AUC 0.5),
//! that lapse serves more accesses locally than classic, that the NuPS modes replicate hot keys,
//! sync them and learn as well as lapse, that every `--sampling` scheme learns, that `--pairs`
//! and the benchmark files (`--eval-dir`, `--wordsim`, `--simlex`, `--analogies`) work, and
//! that malformed input fails with a message naming the problem; and that the `adapm` mode
//! learns as well as lapse by intents alone (no localize, the same negatives as `naive`).
//! Every run uses a fixed `--seed`, printed with its arguments on failure.

mod common;

use std::path::PathBuf;

use common::{epochs, fails, json_with, last_epoch, launch, losses, node_stats, run, scratch, sum};
use serde_json::Value;

const DISTRIBUTED: [&str; 3] = ["classic", "classic-nolocal", "lapse"];
/// The NuPS modes (hot keys replicated; the rest relocated, or static).
const NUPS: [&str; 2] = ["nups", "nups-replicate-only"];
/// Small enough to train in well under a second per run.
const SYNTHETIC: &str = "words=30000,vocab=600,topics=6,seed=2";
const SYNTHETIC_ARGS: [&str; 14] = [
    "--dim",
    "16",
    "--window",
    "3",
    "--negative",
    "3",
    "--epochs",
    "3",
    "--min-count",
    "3",
    "--subsample",
    "1e-3",
    "--lr",
    "0.1",
];
/// The Lapse toy settings (dim 10, window 2, 2 negatives), 3 epochs.
const TOY_ARGS: [&str; 10] = [
    "--dim",
    "10",
    "--window",
    "2",
    "--negative",
    "2",
    "--epochs",
    "3",
    "--seed",
    "1",
];

fn small_txt() -> Option<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/lapse-toy/lm/small.txt");
    if path.is_file() {
        Some(path.to_string_lossy().into_owned())
    } else {
        eprintln!("skipping: {} is absent", path.display());
        None
    }
}

fn report(stdout: &str) -> Value {
    json_with(stdout, "app", "w2v")
}

/// Loss falls and the headline metric beats random embeddings by `margin`.
fn assert_learns(r: &Value, name: &str, margin: f64) {
    let losses = losses(r);
    assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}: {r}");
    assert!(
        losses.last() < losses.first(),
        "loss did not fall: {losses:?}: {r}"
    );
    assert_eq!(r["settings"]["metric"], name, "{r}");
    let m = last_epoch(r, name);
    assert!(
        m > 0.5 + margin,
        "{name} {m} does not beat random embeddings (0.5) by {margin}: {r}"
    );
}

fn args<'a>(mode: &'a str, data: &'a [&'a str], extra: &'a [&'a str]) -> Vec<&'a str> {
    let mut v = vec!["train", "w2v", "--mode", mode];
    v.extend_from_slice(data);
    v.extend_from_slice(extra);
    v
}

fn local_fraction(r: &Value) -> f64 {
    r["local_fraction"].as_f64().expect("local_fraction")
}

#[test]
fn toy_text_trains_in_every_mode_and_lapse_is_more_local_than_classic() {
    let Some(path) = small_txt() else { return };
    let data = ["--data", path.as_str()];
    let single = report(&run(&args("single", &data, &TOY_ARGS)));
    assert_learns(&single, "heldout_auc", 0.04);
    assert_eq!(local_fraction(&single), 1.0);
    let reference = last_epoch(&single, "heldout_auc");
    let mut fractions = Vec::new();
    for mode in DISTRIBUTED.into_iter().chain(NUPS) {
        let r = report(&launch(2, 1, &args(mode, &data, &TOY_ARGS)));
        assert_eq!(
            (r["mode"].as_str(), r["nodes"].as_u64()),
            (Some(mode), Some(2)),
            "{r}"
        );
        assert_learns(&r, "heldout_auc", 0.04);
        let m = last_epoch(&r, "heldout_auc");
        // Same arithmetic; only the split over two workers and timing differ (seeds differ by
        // about 0.01 on this corpus).
        assert!(
            (m - reference).abs() < 0.03,
            "{mode}: heldout_auc {m} vs single {reference}"
        );
        if NUPS.contains(&mode) {
            assert_replicates(&r);
        } else {
            fractions.push(local_fraction(&r));
        }
    }
    let [classic, nolocal, lapse] = fractions[..] else {
        unreachable!()
    };
    assert_eq!(nolocal, 0.0, "classic-nolocal serves nothing directly");
    assert!(
        lapse > classic,
        "lapse local fraction {lapse} <= classic {classic}"
    );
}

#[test]
fn synthetic_topics_are_recovered_in_every_mode() {
    let data = ["--synthetic", SYNTHETIC, "--seed", "3"];
    let single = report(&run(&args("single", &data, &SYNTHETIC_ARGS)));
    assert_learns(&single, "topic_auc", 0.3);
    assert!(
        epochs(&single).last().unwrap()["heldout_auc"]
            .as_f64()
            .unwrap()
            > 0.55,
        "{single}"
    );
    let mut fractions = Vec::new();
    for mode in DISTRIBUTED {
        let r = report(&launch(2, 1, &args(mode, &data, &SYNTHETIC_ARGS)));
        assert_learns(&r, "topic_auc", 0.3);
        fractions.push(local_fraction(&r));
        let relocations = r["relocations"].as_u64().expect("relocations");
        if mode == "lapse" {
            assert!(relocations > 0, "lapse mode moved no key: {r}");
        } else {
            assert_eq!(relocations, 0, "{mode} moved keys: {r}");
        }
    }
    assert!(
        fractions[2] > fractions[0],
        "lapse {} <= classic {}",
        fractions[2],
        fractions[0]
    );
    // With naive sampling only the batches' own words move (how many relocations that saves
    // depends on timing, so only the mode's working is checked).
    let mut no_neg = data.to_vec();
    no_neg.extend(["--sampling", "naive"]);
    let r = report(&launch(2, 1, &args("lapse", &no_neg, &SYNTHETIC_ARGS)));
    assert_learns(&r, "topic_auc", 0.3);
    assert_eq!(r["settings"]["sampling"], "naive", "{r}");
    assert!(r["relocations"].as_u64().expect("relocations") > 0, "{r}");
}

/// The report says that hot keys were replicated (input and output vectors counted apart) and
/// that the replicas were synchronised. Rounds include the flushes of `sync_replicas`, which
/// every run calls before training and before each evaluation, so they are never 0.
fn assert_replicates(r: &Value) -> &Value {
    let rep = &r["settings"]["replication"];
    let n = |field: &str| {
        rep[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no replication.{field}: {r}"))
    };
    assert!(n("words") > 0, "no word replicated: {r}");
    assert_eq!(n("replicated_keys"), n("syn0_keys") + n("syn1_keys"), "{r}");
    assert!(n("syn1_keys") >= n("syn0_keys"), "{r}");
    assert!(n("bytes_sent") > 0, "{r}");
    let f = |field: &str| {
        rep[field]
            .as_f64()
            .unwrap_or_else(|| panic!("no replication.{field}: {r}"))
    };
    assert!(f("rounds_per_node") > 0.0, "{r}");
    for field in ["occurrence_fraction", "access_fraction"] {
        assert!(f(field) > 0.0 && f(field) < 1.0, "{field}: {r}");
    }
    // Rounds go by the work clock by default, bounded by a second.
    assert_eq!(
        rep["sync_every_ms"],
        roam_apps::replication::WORK_CLOCK_BOUND_MS,
        "{r}"
    );
    assert_eq!(
        rep["sync_updates_per_key"],
        roam_apps::w2v::DEFAULT_SYNC_UPDATES_PER_KEY,
        "{r}"
    );
    rep
}

#[test]
fn nups_modes_replicate_hot_keys_and_learn_like_lapse() {
    let data = ["--synthetic", SYNTHETIC, "--seed", "3"];
    let lapse = report(&launch(2, 1, &args("lapse", &data, &SYNTHETIC_ARGS)));
    assert_eq!(lapse["settings"]["replication"], Value::Null, "{lapse}");
    let reference = last_epoch(&lapse, "topic_auc");
    let classic = report(&launch(2, 1, &args("classic", &data, &SYNTHETIC_ARGS)));
    let mut keys = Vec::new();
    for mode in NUPS {
        let r = report(&launch(2, 1, &args(mode, &data, &SYNTHETIC_ARGS)));
        assert_eq!(r["mode"], mode, "{r}");
        assert_learns(&r, "topic_auc", 0.3);
        let m = last_epoch(&r, "topic_auc");
        assert!(
            (m - reference).abs() < 0.03,
            "{mode}: topic_auc {m} vs lapse {reference}"
        );
        keys.push(assert_replicates(&r)["replicated_keys"].clone());
        let relocations = r["relocations"].as_u64().expect("relocations");
        if mode == "nups" {
            assert!(relocations > 0, "nups moved no (unreplicated) key: {r}");
            assert_eq!(r["settings"]["sampling"], "local", "{r}");
        } else {
            assert_eq!(relocations, 0, "{mode} moved keys: {r}");
            // The same batches as classic on the same static homes, plus replicas that are
            // always local: strictly more local accesses (not a matter of timing).
            assert!(
                local_fraction(&r) > local_fraction(&classic),
                "{mode} {} <= classic {}",
                local_fraction(&r),
                local_fraction(&classic)
            );
        }
    }
    assert_eq!(keys[0], keys[1], "both modes pick the same keys");

    // Two workers per node (the sync is a collective of every worker), top-N, another period.
    let mut extra = data.to_vec();
    extra.extend(["--replicate-top", "40", "--sync-every-ms", "2.5"]);
    let r = report(&launch(2, 2, &args("nups", &extra, &SYNTHETIC_ARGS)));
    assert_learns(&r, "topic_auc", 0.3);
    let rep = &r["settings"]["replication"];
    assert_eq!(rep["replicated_keys"], 40, "{r}");
    assert_eq!(rep["top"], 40, "{r}");
    assert_eq!(rep["sync_every_ms"], 2.5, "{r}");
    // Local negatives on static homes plus replicas: each node holds half the keys, so every
    // negative finds a local key (no fallback to a remote read).
    let mut local_neg = data.to_vec();
    local_neg.extend(["--sampling", "local"]);
    let r = report(&launch(
        2,
        1,
        &args("nups-replicate-only", &local_neg, &SYNTHETIC_ARGS),
    ));
    assert_learns(&r, "topic_auc", 0.3);
    for e in epochs(&r) {
        assert_eq!(e["sampling"]["scheme"], "local", "{e}");
        assert_eq!(e["sampling"]["fallback_fraction"], 0.0, "{e}");
        assert_drew_the_negatives(e);
    }
}

/// The sampler drew every trained negative, plus the few equal to their pair's center word
/// (drawn, then skipped as word2vec skips them), and nothing else.
fn assert_drew_the_negatives(e: &Value) {
    let drawn = e["sampling"]["samples"].as_u64().expect("samples");
    let trained = e["negatives"].as_u64().expect("negatives");
    assert!(
        trained <= drawn && drawn - trained < drawn / 20,
        "{drawn} drawn, {trained} trained: {e}"
    );
}

/// One node, one worker: every key is local and the replicas have no peer, so a NuPS run trains
/// exactly single mode's updates (same batches, same random choices); only the rounding differs
/// (a sync round rebases the replica on its primary, which may have added two batches' deltas
/// together). A lost, doubled or stale update (initial vectors, pushes, syncs) would show in
/// the losses.
#[test]
fn alone_the_nups_modes_compute_what_single_computes() {
    // (The same sampling scheme, so the same negatives.)
    let data = [
        "--synthetic",
        SYNTHETIC,
        "--seed",
        "3",
        "--batch-words",
        "10000",
        "--sampling",
        "naive",
    ];
    let single = report(&run(&args("single", &data, &SYNTHETIC_ARGS)));
    for mode in NUPS {
        let r = report(&run(&args(mode, &data, &SYNTHETIC_ARGS)));
        assert!(
            r["settings"]["replication"]["replicated_keys"]
                .as_u64()
                .unwrap()
                > 0,
            "{r}"
        );
        let (a, b) = (losses(&single), losses(&r));
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() <= 1e-5 * x.abs(),
                "{mode}: losses {b:?} vs single {a:?}"
            );
        }
        for metric in ["topic_auc", "heldout_auc"] {
            let (x, y) = (last_epoch(&single, metric), last_epoch(&r, metric));
            assert!((x - y).abs() < 1e-3, "{mode}: {metric} {y} vs single {x}");
        }
    }
}

/// The report's intent counters (`intents` of the run or of an epoch) were counted: intents
/// signalled and keys moved by them; returns `(intents, intent_actions)`.
fn assert_intents(intents: &Value, what: &Value) -> (u64, u64) {
    let n = |field: &str| {
        intents[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no intents.{field}: {what}"))
    };
    assert!(n("intents") > 0, "no intent signalled: {what}");
    assert!(n("intent_keys") >= n("intents"), "{what}");
    assert!(n("late_intents") <= n("intents"), "{what}");
    let late = intents["late_fraction"].as_f64().expect("late_fraction");
    assert!((0.0..=1.0).contains(&late), "{what}");
    assert!(intents["window_mean"].as_f64().expect("window_mean") >= 0.0);
    (n("intents"), n("intent_actions"))
}

/// adapm on 2 nodes learns what lapse learns with the same batches, moving keys by intent only:
/// every key the nodes localized was an intent's action (the app never localizes and the
/// `naive` sampler moves nothing), and the report counts the intents per epoch and in total.
/// Then `--sampling local`: the intents name the batches' words only (fewer keys than naive's,
/// which name the negatives too), negatives come from the keys held here, and it learns.
#[test]
fn adapm_learns_like_lapse_by_intents_alone_with_naive_or_local_negatives() {
    let data = ["--synthetic", SYNTHETIC, "--seed", "3"];
    let lapse = report(&launch(2, 1, &args("lapse", &data, &SYNTHETIC_ARGS)));
    let reference = last_epoch(&lapse, "topic_auc");
    assert!(lapse.get("intents").is_none(), "{lapse}");
    let out = launch(2, 1, &args("adapm", &data, &SYNTHETIC_ARGS));
    let r = report(&out);
    assert_eq!(
        (r["mode"].as_str(), r["nodes"].as_u64()),
        (Some("adapm"), Some(2)),
        "{r}"
    );
    assert_learns(&r, "topic_auc", 0.3);
    let m = last_epoch(&r, "topic_auc");
    assert!(
        (m - reference).abs() < 0.03,
        "adapm: topic_auc {m} vs lapse {reference}"
    );
    assert_eq!(r["settings"]["replication"], Value::Null, "{r}");
    assert_eq!(r["settings"]["sampling"], "naive", "{r}");
    assert_eq!(
        r["settings"]["batch_words"],
        lapse["settings"]["batch_words"]
    );
    assert!(
        r["settings"]["intent_ahead_batches"].as_u64() > Some(0),
        "{r}"
    );
    assert!(r["relocations"].as_u64().expect("relocations") > 0, "{r}");
    let (intents, actions) = assert_intents(&r["intents"], &r);
    assert!(actions > 0, "no intent moved a key: {r}");
    let (mut per_epoch, mut per_epoch_actions) = (0, 0);
    for e in epochs(&r) {
        assert_drew_the_negatives(e);
        let (n, a) = assert_intents(&e["intents"], e);
        per_epoch += n;
        per_epoch_actions += a;
    }
    assert_eq!((per_epoch, per_epoch_actions), (intents, actions), "{r}");
    let stats = node_stats(&out);
    assert_eq!(stats.len(), 2, "{out}");
    assert_eq!(
        sum(&stats, "localize_keys"),
        actions,
        "keys localized other than by intent: {out}"
    );

    let local_data = [&data[..], &["--sampling", "local"]].concat();
    let local_out = launch(2, 1, &args("adapm", &local_data, &SYNTHETIC_ARGS));
    let local = report(&local_out);
    println!(
        "adapm --sampling local: topic_auc {} (naive {m}, lapse {reference}) {} fallbacks {:?}",
        last_epoch(&local, "topic_auc"),
        local["intents"],
        epochs(&local)
            .iter()
            .map(|e| e["sampling"]["fallback_fraction"].clone())
            .collect::<Vec<_>>()
    );
    assert_learns(&local, "topic_auc", 0.3);
    assert_eq!(local["settings"]["sampling"], "local", "{local}");
    for e in epochs(&local) {
        assert_drew_the_negatives(e);
        // A fallback is a draw that found no key held here in 100 tries: on this corpus
        // (15 batches a node and epoch, all signalled at the epoch's start) the first batches
        // of an epoch are late, the node holding few output vectors then (1-5 % measured).
        let fallback = e["sampling"]["fallback_fraction"].as_f64().unwrap();
        assert!(fallback < 0.2, "local draws read remotely: {e}");
    }
    let (local_intents, local_actions) = assert_intents(&local["intents"], &local);
    assert_eq!(local_intents, intents, "one intent per batch: {local}");
    let keys = |r: &Value| r["intents"]["intent_keys"].as_u64().expect("intent_keys");
    assert!(keys(&local) < keys(&r), "{local} vs {r}");
    let local_stats = node_stats(&local_out);
    assert_eq!(
        sum(&local_stats, "localize_keys"),
        local_actions,
        "keys localized other than by intent: {local_out}"
    );
}

/// One node, one worker: adapm draws its negatives when it signals a batch's intent, from the
/// same sampler as `naive` draws them when the batch trains, in the same order, so it trains
/// exactly single mode's updates with `--sampling naive` (every key is here: no intent acts).
#[test]
fn alone_adapm_computes_what_single_computes_with_naive_negatives() {
    let data = [
        "--synthetic",
        SYNTHETIC,
        "--seed",
        "3",
        "--batch-words",
        "1000",
        "--sampling",
        "naive",
    ];
    let single = report(&run(&args("single", &data, &SYNTHETIC_ARGS)));
    let r = report(&run(&args("adapm", &data, &SYNTHETIC_ARGS)));
    assert_eq!(losses(&r), losses(&single), "{r}\n{single}");
    for metric in ["topic_auc", "heldout_auc"] {
        assert_eq!(
            last_epoch(&r, metric),
            last_epoch(&single, metric),
            "{metric}"
        );
    }
    let (_, actions) = assert_intents(&r["intents"], &r);
    assert_eq!(actions, 0, "everything is local on one node: {r}");
    assert_eq!(r["intents"]["late_intents"], 0, "{r}");
}

/// Every sampling scheme trains the negatives it draws: the run learns, the report echoes the
/// scheme, counts one sample per negative, and only `local` may fall back to remote keys.
#[test]
fn every_sampling_scheme_learns() {
    let data = |scheme| {
        [
            "--synthetic",
            SYNTHETIC,
            "--seed",
            "4",
            "--sampling",
            scheme,
        ]
    };
    for scheme in [
        "naive",
        "preloc",
        "pool:1",
        "pool:16",
        "pool:4:strict",
        "local",
        "local:next",
    ] {
        let r = report(&launch(
            2,
            1,
            &args("lapse", &data(scheme), &SYNTHETIC_ARGS),
        ));
        assert_learns(&r, "topic_auc", 0.3);
        assert_eq!(r["settings"]["sampling"], scheme, "{r}");
        for e in epochs(&r) {
            assert_drew_the_negatives(e);
            let fallback = e["sampling"]["fallback_fraction"]
                .as_f64()
                .expect("fraction");
            assert!((0.0..=1.0).contains(&fallback), "{e}");
            if !scheme.starts_with("local") {
                assert_eq!(fallback, 0.0, "{scheme}: {e}");
            }
        }
    }
    // In single mode every key is local: local sampling never falls back.
    let r = report(&run(&args("single", &data("local"), &SYNTHETIC_ARGS)));
    assert!(
        epochs(&r)
            .iter()
            .all(|e| e["sampling"]["fallback_fraction"] == 0.0),
        "{r}"
    );
}

#[test]
fn listed_pairs_are_scored() {
    // Same-topic word pairs of the planted corpus (names are t<topic>w<index>).
    let dir = scratch("w2v", "pairs");
    let pairs = dir.join("pairs.tsv");
    let text: String = (0..6)
        .flat_map(|t| (1..6).map(move |i| format!("t{t}w0\tt{t}w{i}\n")))
        .collect();
    std::fs::write(&pairs, format!("# same-topic pairs\n{text}")).unwrap();
    let pairs = pairs.to_string_lossy().into_owned();
    let data = [
        "--synthetic",
        SYNTHETIC,
        "--seed",
        "5",
        "--pairs",
        pairs.as_str(),
    ];
    let r = report(&run(&args("single", &data, &SYNTHETIC_ARGS)));
    assert_learns(&r, "pair_auc", 0.2);
    assert_eq!(r["settings"]["pairs_listed"], 30);
}

/// `--eval-dir` with hand-written benchmark files in gensim's formats (no fetched data): same-
/// topic pairs of the planted corpus scored 9–10 and cross-topic pairs 0–1 (mixed case, matched
/// case-insensitively as gensim does), so the Spearman correlation of the cosines with the
/// scores must be clearly positive; analogy questions are counted and scored.
#[test]
fn benchmarks_of_an_eval_dir_are_scored() {
    let dir = scratch("w2v", "eval-dir");
    let mut sim = String::from("# Word 1\tWord 2\tHuman (mean)\n");
    for t in 0..6 {
        for i in 1..4 {
            sim.push_str(&format!("T{t}W0\tt{t}w{i}\t{}\n", 9 + i % 2));
            sim.push_str(&format!("t{t}w{i}\tt{}w{i}\t{}\n", (t + 1) % 6, i % 2));
        }
    }
    sim.push_str("t0w0\tt0w0\t10\nt0w1\tunicorn\t5\n");
    std::fs::write(dir.join("wordsim353.tsv"), &sim).unwrap();
    std::fs::write(dir.join("simlex999.txt"), &sim).unwrap();
    let analogies = ": capital-common-countries\nt0w0 t0w1 t1w0 t1w1\nt0w0 t0w1 t1w0 unicorn\n\
                     : gram1-adjective-to-adverb\nt2w0 t2w1 t3w0 t3w1\nt2w0 t2w2 t3w0 t3w2\n";
    std::fs::write(dir.join("questions-words.txt"), analogies).unwrap();
    let eval_dir = dir.to_string_lossy().into_owned();
    let data = [
        "--synthetic",
        SYNTHETIC,
        "--seed",
        "6",
        "--eval-dir",
        eval_dir.as_str(),
    ];
    let r = report(&run(&args("single", &data, &SYNTHETIC_ARGS)));
    assert_learns(&r, "topic_auc", 0.3);
    let s = &r["settings"];
    for (field, want) in [
        ("wordsim_pairs_listed", 38),
        ("wordsim_pairs_covered", 37),
        ("simlex_pairs_listed", 38),
        ("analogy_questions_listed", 4),
        ("analogy_questions_covered", 3),
        ("analogy_questions_semantic", 1),
    ] {
        assert_eq!(s[field], want, "{field}: {r}");
    }
    assert!(s["restrict_vocab"].as_u64().unwrap() > 500, "{r}");
    for e in epochs(&r) {
        for field in ["analogy_accuracy", "analogy_semantic", "analogy_syntactic"] {
            let a = e[field]
                .as_f64()
                .unwrap_or_else(|| panic!("no {field}: {e}"));
            assert!((0.0..=1.0).contains(&a), "{field}: {e}");
        }
        assert!(e["eval_cpu_seconds"].as_f64().unwrap() >= 0.0, "{e}");
    }
    let ws = last_epoch(&r, "wordsim_spearman");
    assert!(ws > 0.5, "wordsim_spearman {ws}: {r}");
    assert_eq!(
        ws,
        last_epoch(&r, "simlex_spearman"),
        "same file, same score"
    );
    // The explicit options override the directory's files.
    let other = dir.join("other.tsv");
    std::fs::write(&other, "t0w0\tt0w1\t1\nt0w0\tt1w1\t2\nt0w2\tt0w3\t3\n").unwrap();
    let mut extra = data.to_vec();
    let other = other.to_string_lossy().into_owned();
    extra.extend(["--simlex", other.as_str()]);
    let r = report(&run(&args("single", &extra, &SYNTHETIC_ARGS)));
    assert_eq!(r["settings"]["simlex_pairs_listed"], 3, "{r}");
    assert_eq!(r["settings"]["wordsim_pairs_listed"], 38, "{r}");
}

#[test]
fn malformed_input_fails_with_a_clear_message() {
    let dir = scratch("w2v", "bad");
    let file = |name: &str, body: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p.to_string_lossy().into_owned()
    };
    let empty = file("empty.txt", b"\n \n");
    let rare = file("rare.txt", b"every word here is different\n");
    let binary = file("binary.txt", b"some words\nand \xff then\n");
    let pairs = file("pairs.tsv", b"one\ttwo\nthree four\n");
    let unknown = file("unknown.tsv", b"one\ttwo\nthree\tfour\n");
    let wordsim = file("wordsim.tsv", b"# header\nt0w0\tt0w1\t7\nt0w0\tt0w2\n");
    let questions = file("questions.txt", b": s\nt0w0 t0w1 t1w0\n");
    let no_eval = dir.join("no-eval").to_string_lossy().into_owned();
    std::fs::create_dir_all(&no_eval).unwrap();
    let missing = dir.join("missing.txt").to_string_lossy().into_owned();
    for (extra, needles) in [
        (vec!["--data", &empty], vec![empty.as_str(), "no words"]),
        (
            vec!["--data", &rare],
            vec![rare.as_str(), "--min-count 5", "occurs 1 times"],
        ),
        (
            vec!["--data", &binary],
            vec![binary.as_str(), "line 2", "UTF-8"],
        ),
        (vec!["--data", &missing], vec![missing.as_str()]),
        (vec!["--synthetic", "words=lots"], vec!["words=\"lots\""]),
        (vec!["--synthetic", "vocab=10,topics=10"], vec!["too small"]),
        (
            vec![
                "--synthetic",
                SYNTHETIC,
                "--min-count",
                "3",
                "--pairs",
                &pairs,
            ],
            vec![pairs.as_str(), "line 2"],
        ),
        (
            vec![
                "--synthetic",
                SYNTHETIC,
                "--min-count",
                "3",
                "--pairs",
                &unknown,
            ],
            vec![unknown.as_str(), "only 0 of the 2 pairs"],
        ),
        (
            vec!["--synthetic", SYNTHETIC, "--wordsim", &wordsim],
            vec![wordsim.as_str(), "line 3", "word1<TAB>word2<TAB>score"],
        ),
        (
            vec!["--synthetic", SYNTHETIC, "--analogies", &questions],
            vec![questions.as_str(), "line 2", "four words"],
        ),
        (
            vec!["--synthetic", SYNTHETIC, "--eval-dir", &no_eval],
            vec!["--eval-dir", "wordsim353.tsv is missing"],
        ),
        (vec!["--window", "0"], vec!["--window"]),
        (vec!["--heldout", "0.95"], vec!["--heldout"]),
    ] {
        let err = fails(&args("single", &extra, &[]));
        for n in needles {
            assert!(err.contains(n), "{extra:?}: expected {n:?} in:\n{err}");
        }
    }
    for bad in ["pool:0", "pool", "local:far", "uniform"] {
        let err = fails(&args("lapse", &["--sampling", bad], &[]));
        assert!(
            err.contains("--sampling") && err.contains("pool:U"),
            "{bad}: {err}"
        );
    }
    for (mode, extra, needle) in [
        ("lapse", vec!["--replicate-top", "5"], "--replicate-top"),
        ("lapse", vec!["--intent-ahead", "5"], "--intent-ahead"),
        (
            "adapm",
            vec!["--sampling", "preloc"],
            "only --sampling naive, local or local:next",
        ),
        ("classic", vec!["--sync-every-ms", "5"], "--sync-every-ms"),
        ("nups", vec!["--replicate-alpha", "0"], "--replicate-alpha"),
        ("nups", vec!["--sync-every-ms", "0"], "--sync-every-ms"),
        (
            "nups",
            vec!["--replicate-alpha", "2", "--replicate-top", "5"],
            "--replicate-top",
        ),
    ] {
        let err = fails(&args(mode, &extra, &[]));
        assert!(err.contains(needle), "{mode} {extra:?}: {err}");
    }
}
