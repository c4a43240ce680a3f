//! End-to-end runs of `roam train kge`: tiny trainings on lapse-toy/kge and on a tiny synthetic
//! graph in every mode (single without launch, the others on 2 local nodes; the NuPS modes
//! replicate every relation and report their replication), every negative-sampling scheme
//! (`--sampling`) on 2 nodes, the `adapm` mode (intents instead of localizes) on 2 nodes, the
//! bucket schedule under `adapm` and `nups`, RESCAL
//! with its per-key value lengths, text (names) input, and malformed input. Quality is asserted against the model's own random-initialisation baseline
//! (`--eta 0`: the initial embeddings scored with the same filtered ranking), never against
//! timings. Seeds are fixed and printed.

mod common;

use std::path::PathBuf;

use common::{epochs, fails, json_with, last_epoch, launch, node_stats, run, scratch, sum};
use serde_json::Value;

const TOY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/data/lapse-toy/kge"
);
const TINY: &str = "entities=300,relations=12,triples=6000,clusters=15,seed=3";

fn toy() -> String {
    let path = PathBuf::from(TOY);
    assert!(
        path.join("train.del").is_file(),
        "lapse-toy data missing at {}",
        path.display()
    );
    path.display().to_string()
}

/// Runs one kge training (single: in-process threads; else 2 nodes) and returns its report.
fn train(mode: &str, nodes: u32, workers: u32, data: &[&str], extra: &[&str]) -> Value {
    let workers_s = workers.to_string();
    let mut args = vec!["train", "kge", "--mode", mode, "--seed", "5"];
    args.extend_from_slice(data);
    args.extend_from_slice(extra);
    println!("seed 5: {args:?} on {nodes} node(s) x {workers} worker(s)");
    let out = if mode == "single" {
        args.extend_from_slice(&["--workers-per-node", &workers_s]);
        run(&args)
    } else {
        launch(nodes, workers, &args)
    };
    let report = json_with(&out, "app", "kge");
    assert_eq!(report["mode"], mode, "{out}");
    report
}

/// The MRR of the model's random initialisation (`--eta 0`, one epoch in single mode with
/// `workers` workers): the baseline that trained runs must clearly beat.
fn baseline(workers: u32, data: &[&str]) -> f64 {
    let report = train("single", 1, workers, data, &["--epochs", "1", "--eta", "0"]);
    last_epoch(&report, "mrr")
}

/// The NuPS modes replicate at least every relation, and the replicas were synchronised every
/// `sync_ms` (kge's default `kge::replicate::SYNC_EVERY_MS` is 1: one AdaGrad step per hub
/// round).
fn assert_replicated(report: &Value, sync_ms: f64) {
    let r = &report["settings"]["replication"];
    let relations = report["settings"]["relations"].as_u64().expect("relations");
    assert!(
        r["replicated_keys"].as_u64() >= Some(relations.max(1))
            && r["replicated_relations"].as_u64() == Some(relations),
        "every relation is replicated: {report}"
    );
    assert!(
        r["rounds_per_node"].as_f64() > Some(0.0) && r["bytes_sent"].as_u64() > Some(0),
        "replicas were synchronised: {report}"
    );
    let fraction = r["access_fraction"].as_f64().expect("access_fraction");
    assert!(fraction > 0.0 && fraction <= 1.0, "{report}");
    assert_eq!(r["sync_every_ms"].as_f64(), Some(sync_ms), "{report}");
}

/// The run used sampling scheme `scheme` for all its negatives: the settings echo it, and the
/// run's and every epoch's `sampling` object count 2 × neg_ratio draws per training triple
/// (over the cluster) with a fallback fraction in [0, 1] (0 unless the scheme is `local`).
fn assert_sampled(report: &Value, scheme: &str) {
    let settings = &report["settings"];
    assert_eq!(settings["sampling"], scheme, "{report}");
    let per_epoch = settings["train_triples"].as_u64().expect("train_triples")
        * 2
        * settings["neg_ratio"].as_u64().expect("neg_ratio");
    let check = |sampling: &Value, samples: u64| {
        assert_eq!(sampling["scheme"], scheme, "{report}");
        assert_eq!(sampling["samples"].as_u64(), Some(samples), "{report}");
        let fallbacks = sampling["fallback_fraction"]
            .as_f64()
            .expect("fallback_fraction");
        assert!((0.0..=1.0).contains(&fallbacks), "{report}");
        if !scheme.starts_with("local") {
            assert_eq!(fallbacks, 0.0, "only local falls back: {report}");
        }
    };
    for e in epochs(report) {
        check(&e["sampling"], per_epoch);
    }
    check(&report["sampling"], per_epoch * epochs(report).len() as u64);
}

/// Loss falls from the first to the last epoch, and MRR clearly beats `baseline`.
fn assert_learned(report: &Value, baseline: f64) {
    let e = epochs(report);
    let first = e[0]["loss"].as_f64().expect("loss");
    let final_loss = last_epoch(report, "loss");
    assert!(
        final_loss < first,
        "loss must fall: {first} -> {final_loss} in {report}"
    );
    let mrr = last_epoch(report, "mrr");
    assert!(
        mrr > 3.0 * baseline && mrr > baseline + 0.1,
        "MRR {mrr} vs random baseline {baseline}: {report}"
    );
    for k in ["hits_at_1", "hits_at_3", "hits_at_10"] {
        let h = last_epoch(report, k);
        assert!((0.0..=1.0).contains(&h), "{k} = {h}");
    }
    assert!(
        last_epoch(report, "hits_at_1") <= last_epoch(report, "hits_at_3")
            && last_epoch(report, "hits_at_3") <= last_epoch(report, "hits_at_10")
    );
}

#[test]
fn lapse_toy_complex_learns_in_every_mode_and_lapse_is_more_local_than_classic() {
    let data = toy();
    let data = ["--data", data.as_str()];
    // The default model (ComplEx, dim 50 = Lapse's 100 reals): see the synthetic test below
    // for why not a smaller one.
    let small = ["--epochs", "4"];
    let baseline = baseline(2, &data);
    assert!(
        baseline < 0.1,
        "random embeddings rank near chance: {baseline}"
    );

    let single = train("single", 1, 2, &data, &small);
    assert_learned(&single, baseline);
    assert_sampled(&single, "naive");
    assert_eq!(single["local_fraction"].as_f64(), Some(1.0));
    assert_eq!(single["settings"]["entities"], 280);
    assert_eq!(single["settings"]["relations"], 112);

    let mut local = std::collections::HashMap::new();
    for mode in [
        "lapse",
        "classic",
        "classic-nolocal",
        "nups",
        "nups-replicate-only",
    ] {
        let report = train(mode, 2, 2, &data, &small);
        assert_eq!(
            (
                report["nodes"].as_u64(),
                report["workers_per_node"].as_u64()
            ),
            (Some(2), Some(2))
        );
        assert_learned(&report, baseline);
        // Each mode's default scheme (roam_apps::sampling::default_scheme).
        let scheme = match mode {
            "lapse" | "nups" => "preloc",
            _ => "naive",
        };
        assert_sampled(&report, scheme);
        // Same data, epochs and model: distributed quality is in single's range (loose bound
        // for 4 epochs; the docs hold the tight comparison).
        assert!(
            last_epoch(&report, "mrr") > last_epoch(&single, "mrr") - 0.1,
            "{mode}: {report} vs {single}"
        );
        local.insert(
            mode,
            report["local_fraction"].as_f64().expect("local_fraction"),
        );
        if mode.starts_with("nups") {
            assert_replicated(&report, 1.0);
        } else {
            assert!(report["settings"]["replication"].is_null(), "{report}");
        }
        if mode == "lapse" || mode == "nups" {
            assert!(
                report["relocations"].as_u64() > Some(0),
                "{mode} moves keys: {report}"
            );
        } else {
            assert_eq!(
                report["relocations"].as_u64(),
                Some(0),
                "static modes never move keys: {report}"
            );
        }
    }
    assert!(
        local["lapse"] > local["classic"] + 0.2,
        "lapse {} vs classic {}",
        local["lapse"],
        local["classic"]
    );
    assert_eq!(local["classic-nolocal"], 0.0);
    assert!(
        local["nups"] > local["classic"] + 0.2,
        "nups {} vs classic {}",
        local["nups"],
        local["classic"]
    );
    // Static entities as in classic, but the replicated relations are local everywhere.
    assert!(
        local["nups-replicate-only"] > local["classic"],
        "nups-replicate-only {} vs classic {}",
        local["nups-replicate-only"],
        local["classic"]
    );
}

#[test]
fn tiny_synthetic_graph_learns_on_two_nodes_with_one_worker_each() {
    let data = ["--synthetic", TINY];
    // The default dimension, no workaround: with `--dim 16` the L2 term (gamma / length per
    // use) outweighs the tiny bilinear gradients of the flat start, and runs in any mode could
    // stay at MRR 0.06–0.2 for all 6 epochs (measured: 3 of 8 lapse runs at gamma 0.1, 8 of 8
    // at 0.2, one of 3 single runs); with the default dim 50 none of 12 lapse runs did.
    let small = ["--epochs", "6", "--eval-every", "2"];
    let baseline = baseline(1, &data);
    let single = train("single", 1, 1, &data, &small);
    assert_learned(&single, baseline);
    assert!(
        single["dataset"]
            .as_str()
            .is_some_and(|d| d.starts_with("synthetic:entities=300"))
    );
    // Evaluated at epochs 2 and 4 only.
    let evaluated: Vec<bool> = epochs(&single)
        .iter()
        .map(|e| e.get("mrr").is_some())
        .collect();
    assert_eq!(evaluated, [false, true, false, true, false, true]);
    let lapse = train("lapse", 2, 1, &data, &small);
    assert_learned(&lapse, baseline);
    let classic = train("classic", 2, 1, &data, &small);
    assert_learned(&classic, baseline);
    assert!(
        lapse["local_fraction"].as_f64() > classic["local_fraction"].as_f64(),
        "{lapse}\n{classic}"
    );
    // The NuPS modes, with hot entities too: a low threshold on this small graph (the default
    // 100× the mean picks none) and the top-N chooser.
    let nups = train(
        "nups",
        2,
        1,
        &data,
        &[&small[..], &["--replicate-alpha", "2"]].concat(),
    );
    assert_learned(&nups, baseline);
    assert_replicated(&nups, 1.0);
    let r = &nups["settings"]["replication"];
    assert!(r["replicated_entities"].as_u64() > Some(0), "{nups}");
    assert_eq!(r["chooser"], "above_mean");
    let top = [
        &small[..],
        &["--replicate-top", "30", "--sync-every-ms", "10"],
    ]
    .concat();
    let replicate_only = train("nups-replicate-only", 2, 1, &data, &top);
    assert_learned(&replicate_only, baseline);
    assert_replicated(&replicate_only, 10.0);
    let r = &replicate_only["settings"]["replication"];
    assert_eq!(
        (r["replicated_entities"].as_u64(), r["chooser"].as_str()),
        (Some(30), Some("top_n"))
    );
    assert!(
        replicate_only["local_fraction"].as_f64() > classic["local_fraction"].as_f64(),
        "{replicate_only}\n{classic}"
    );
}

#[test]
fn every_sampling_scheme_learns_on_two_nodes() {
    let data = toy();
    let data = ["--data", data.as_str()];
    let small = ["--epochs", "4"];
    let baseline = baseline(2, &data);
    let single = train("single", 1, 2, &data, &small);
    let sampled = |mode, workers, scheme| {
        let extra = [&small[..], &["--sampling", scheme]].concat();
        train(mode, 2, workers, &data, &extra)
    };
    // Every scheme in nups mode (replicated relations, relocated entities), the exact ones in
    // lapse mode too; 2 nodes x 2 workers, the same quality bounds as the modes' test.
    let runs = [
        ("nups", "naive"),
        ("nups", "preloc"),
        ("nups", "pool:1"),
        ("nups", "pool:4"),
        ("nups", "pool:4:strict"),
        ("nups", "local"),
        ("nups", "local:next"),
        ("lapse", "naive"),
        ("lapse", "pool:4"),
        ("lapse", "local"),
    ];
    for (mode, scheme) in runs {
        let report = sampled(mode, 2, scheme);
        println!(
            "{mode} --sampling {scheme}: MRR {} {}",
            last_epoch(&report, "mrr"),
            report["sampling"]
        );
        assert_learned(&report, baseline);
        assert!(
            last_epoch(&report, "mrr") > last_epoch(&single, "mrr") - 0.1,
            "{mode} --sampling {scheme}: {report} vs {single}"
        );
        assert_sampled(&report, scheme);
        assert!(
            report["relocations"].as_u64() > Some(0),
            "{mode} moves keys: {report}"
        );
    }
    // Keys that never move: local draws from this node's static share (and falls back where
    // it holds none), pool takes its groups as they are.
    for scheme in ["local", "pool:4"] {
        let report = sampled("classic", 1, scheme);
        assert_learned(&report, baseline);
        assert_sampled(&report, scheme);
        assert_eq!(report["relocations"].as_u64(), Some(0), "{report}");
    }
}

/// The run's (or an epoch's) `intents` object counted intents and keys moved by them; returns
/// `(intents, intent_actions)`.
fn assert_intents(intents: &Value, report: &Value) -> (u64, u64) {
    let n = |field: &str| {
        intents[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no intents.{field}: {report}"))
    };
    assert!(n("intents") > 0, "no intent signalled: {report}");
    assert!(n("intent_actions") > 0, "no intent moved a key: {report}");
    assert!(n("late_intents") <= n("intents"), "{report}");
    let late = intents["late_fraction"].as_f64().expect("late_fraction");
    assert!((0.0..=1.0).contains(&late), "{report}");
    (n("intents"), n("intent_actions"))
}

/// adapm on 2 nodes × 2 workers: the same quality bounds as the other modes on lapse-toy,
/// negatives drawn `naive` (2N per triple), one intent per training triple, and every key the
/// nodes localized an intent's action (the app localizes nothing itself, not even relations).
/// Then the same with `--sampling local` (AdaPM's own KGE setup): the intents name the
/// triples' own keys only, the negatives come from the keys held here, and it learns within
/// the same bound.
#[test]
fn adapm_learns_on_two_nodes_by_intents_alone_with_naive_or_local_negatives() {
    let data = toy();
    let data = ["--data", data.as_str()];
    // 6 epochs, not the other modes' 4: adapm's replicas are bounded-stale, and its first
    // epoch learns slower (loss 0.37-0.52 after it, against single's 0.24), so at 4 epochs its
    // MRR is 0.01-0.11 below single's (9 runs; CI once saw 0.395 against 0.505), at 6
    // 0.00-0.05 (4 runs: 0.478-0.525 against 0.527).
    let small = ["--epochs", "6"];
    let baseline = baseline(2, &data);
    let single = train("single", 1, 2, &data, &small);
    let mut args = vec!["train", "kge", "--mode", "adapm", "--seed", "5"];
    args.extend_from_slice(&data);
    args.extend_from_slice(&small);
    println!("seed 5: {args:?} on 2 nodes x 2 workers");
    let out = launch(2, 2, &args);
    let report = json_with(&out, "app", "kge");
    assert_eq!(report["mode"], "adapm", "{report}");
    assert_learned(&report, baseline);
    assert!(
        last_epoch(&report, "mrr") > last_epoch(&single, "mrr") - 0.1,
        "adapm: {report} vs {single}"
    );
    assert_sampled(&report, "naive");
    assert!(report["settings"]["replication"].is_null(), "{report}");
    assert_eq!(report["settings"]["localize_ahead"], 0, "{report}");
    assert_eq!(
        report["settings"]["intent_ahead"].as_u64(),
        Some(roam_apps::intents::KGE_AHEAD_TRIPLES as u64)
    );
    assert!(report["relocations"].as_u64() > Some(0), "{report}");
    let (intents, actions) = assert_intents(&report["intents"], &report);
    let triples = report["settings"]["train_triples"].as_u64().unwrap();
    assert_eq!(intents, triples * epochs(&report).len() as u64, "{report}");
    for e in epochs(&report) {
        // Every epoch signals one intent per triple; by the last epochs every key may already
        // be where its intents want it (no action), so actions are checked over the run.
        let n = |field: &str| e["intents"][field].as_u64().expect(field);
        assert_eq!(n("intents"), triples, "{e}");
        assert!(n("late_intents") <= n("intents"), "{e}");
    }
    let stats = node_stats(&out);
    assert_eq!(stats.len(), 2, "{out}");
    assert_eq!(
        sum(&stats, "localize_keys"),
        actions,
        "keys localized other than by intent: {out}"
    );

    // `--sampling local`: the same data and seed.
    args.extend_from_slice(&["--sampling", "local"]);
    println!("seed 5: {args:?} on 2 nodes x 2 workers");
    let local_out = launch(2, 2, &args);
    let local = json_with(&local_out, "app", "kge");
    println!(
        "adapm --sampling local: MRR {} (naive {}, single {}) {}",
        last_epoch(&local, "mrr"),
        last_epoch(&report, "mrr"),
        last_epoch(&single, "mrr"),
        local["sampling"]
    );
    assert_learned(&local, baseline);
    assert!(
        last_epoch(&local, "mrr") > last_epoch(&single, "mrr") - 0.1,
        "adapm local: {local} vs {single}"
    );
    // Every negative drawn through the sampler, served from the keys held here (a fallback is
    // a draw that found none in 100 tries: none of lapse-toy's 280 entities on a node).
    assert_sampled(&local, "local");
    let fallbacks = local["sampling"]["fallback_fraction"].as_f64().unwrap();
    assert!(fallbacks < 0.01, "local draws read remotely: {local}");
    // One intent per triple still, but of its s, r and o only (naive's name its negatives
    // too). (Share grants fell by a quarter to a third in 3 runs, 1,150-1,180 against
    // 1,560-1,690, but they depend on timing, so they are not asserted.)
    let (local_intents, _) = assert_intents(&local["intents"], &local);
    assert_eq!(local_intents, intents, "{local}");
    let keys = |r: &Value| r["intents"]["intent_keys"].as_u64().expect("intent_keys");
    assert!(keys(&local) <= 3 * local_intents, "{local}");
    assert!(keys(&local) < keys(&report), "{local} vs {report}");
    let local_stats = node_stats(&local_out);
    assert_eq!(
        sum(&local_stats, "localize_keys"),
        local["intents"]["intent_actions"].as_u64().unwrap(),
        "keys localized other than by intent: {local_out}"
    );
}

/// adapm with the bucket schedule on 2 nodes × 2 workers: 8 entity parts, 7 rounds an
/// epoch, one intent per worker and round (the next round's, signalled a round ahead), every
/// triple trained once an epoch (2N negatives each, drawn by the schedule), and the model
/// learns within the bound of the other modes' tests.
#[test]
fn adapm_learns_with_the_bucket_schedule() {
    let data = toy();
    let data = ["--data", data.as_str()];
    let baseline = baseline(2, &data);
    let small = ["--epochs", "4"];
    let single = train("single", 1, 2, &data, &small);
    let report = train(
        "adapm",
        2,
        2,
        &data,
        &["--epochs", "4", "--schedule", "buckets"],
    );
    assert_learned(&report, baseline);
    assert!(
        last_epoch(&report, "mrr") > last_epoch(&single, "mrr") - 0.1,
        "adapm buckets: {report} vs {single}"
    );
    assert_eq!(report["settings"]["schedule"], "buckets", "{report}");
    assert_sampled(&report, "buckets");
    let per_worker = report["settings"]["triples_per_worker"]
        .as_array()
        .expect("triples_per_worker");
    let total: u64 = per_worker.iter().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(per_worker.len(), 4, "{report}");
    assert_eq!(Some(total), report["settings"]["train_triples"].as_u64());
    // Each round's intent is signalled in the round before (the first round's in the
    // previous epoch, or at the start), so the rounds' intents add up to one per round.
    let (workers, rounds) = (4, 7);
    let per_epoch: Vec<u64> = epochs(&report)
        .iter()
        .map(|e| assert_intents(&e["intents"], &report).0)
        .collect();
    assert_eq!(
        per_epoch,
        [
            workers * (rounds + 1),
            workers * rounds,
            workers * rounds,
            workers * (rounds - 1)
        ],
        "{report}"
    );
    assert!(
        report["relocations"].as_u64() > Some(0),
        "parts moved: {report}"
    );
}

/// nups with the bucket schedule on 2 nodes × 2 workers: no intents, each round's parts
/// localized at the barrier before it (keys move), the relations replicated, and the model
/// learns; pushing the pool's gradients every 16 triples pushes more keys than once a round,
/// everything else being equal (the same seed draws the same pools and negatives). lapse
/// (relations not replicated: read at their homes) and classic (nothing moves) learn too.
#[test]
fn nups_learns_with_the_bucket_schedule_and_flushes_pool_gradients_as_asked() {
    let data = toy();
    let data = ["--data", data.as_str()];
    let baseline = baseline(2, &data);
    let single = train("single", 1, 2, &data, &["--epochs", "4"]);
    let run = |flush: &str| {
        let mut args = vec!["train", "kge", "--mode", "nups", "--seed", "5"];
        args.extend_from_slice(&data);
        args.extend_from_slice(&["--epochs", "4", "--schedule", "buckets"]);
        args.extend_from_slice(&["--bucket-pool-flush", flush]);
        println!("seed 5: {args:?} on 2 nodes x 2 workers");
        let out = launch(2, 2, &args);
        (json_with(&out, "app", "kge"), node_stats(&out))
    };
    let (report, stats) = run("16");
    println!(
        "nups buckets: MRR {} (single {})",
        last_epoch(&report, "mrr"),
        last_epoch(&single, "mrr")
    );
    assert_learned(&report, baseline);
    assert!(
        last_epoch(&report, "mrr") > last_epoch(&single, "mrr") - 0.05,
        "nups buckets: {report} vs {single}"
    );
    assert_eq!(report["settings"]["schedule"], "buckets", "{report}");
    assert_eq!(report["settings"]["bucket_pool_flush"], 16, "{report}");
    assert_sampled(&report, "buckets");
    assert_replicated(&report, 1.0);
    assert_eq!(sum(&stats, "intents"), 0, "{stats:?}");
    assert!(
        sum(&stats, "localize_keys") > 0,
        "parts localized: {stats:?}"
    );
    assert!(
        report["relocations"].as_u64() > Some(0),
        "parts moved: {report}"
    );

    let (once, once_stats) = run("0");
    assert_learned(&once, baseline);
    assert_eq!(once["settings"]["localize_ahead"], 0, "{once}");
    let pushed = |stats: &[Value]| sum(stats, "local_push_keys") + sum(stats, "remote_push_keys");
    assert!(
        pushed(&stats) > pushed(&once_stats),
        "flushing every 16 triples pushes more: {} vs {}",
        pushed(&stats),
        pushed(&once_stats)
    );

    for mode in ["lapse", "classic"] {
        let report = train(
            mode,
            2,
            2,
            &data,
            &["--epochs", "4", "--schedule", "buckets"],
        );
        assert_learned(&report, baseline);
        assert_eq!(report["settings"]["schedule"], "buckets", "{report}");
        let moved = report["relocations"].as_u64().expect("relocations");
        assert_eq!(moved > 0, mode == "lapse", "{mode}: {report}");
    }
}

#[test]
fn rescal_relations_are_single_keys_of_dim_squared_values() {
    let data = toy();
    let data = ["--data", data.as_str(), "--model", "rescal"];
    // The default dim (50): like ComplEx, a much smaller model (`--dim 8`: 2 of 5 lapse runs
    // measured at MRR 0.04–0.08 after 3 epochs) can stall near the flat start.
    let baseline = baseline(1, &data);
    let small = ["--epochs", "3"];
    let lapse = train("lapse", 2, 2, &data, &small);
    assert_eq!(lapse["settings"]["model"], "rescal");
    assert_learned(&lapse, baseline);
    // Negatives are entity keys, all of one length, though relations have another.
    assert_sampled(&lapse, "preloc");
    let classic = train("classic", 2, 1, &data, &small);
    assert_learned(&classic, baseline);
}

#[test]
fn named_triples_in_tsv_files_train() {
    let dir = scratch("kge", "names");
    // A small graph with a learnable rule: "near" links neighbours on a ring of 60 places.
    let name = |i: usize| format!("place {}", i % 60);
    let mut lines = String::new();
    for i in 0..60 {
        lines += &format!(
            "{}\tnear\t{}\n{}\tfar\t{}\n",
            name(i),
            name(i + 1),
            name(i),
            name(i + 30)
        );
    }
    std::fs::write(dir.join("train.tsv"), &lines).unwrap();
    std::fs::write(
        dir.join("valid.tsv"),
        format!("{}\tnear\t{}\n", name(5), name(6)),
    )
    .unwrap();
    std::fs::write(
        dir.join("test.tsv"),
        format!("{}\tnear\t{}\n", name(7), name(8)),
    )
    .unwrap();
    let report = train(
        "single",
        1,
        1,
        &["--data", dir.to_str().unwrap()],
        &["--dim", "8", "--epochs", "2"],
    );
    assert_eq!(
        (
            report["settings"]["entities"].as_u64(),
            report["settings"]["relations"].as_u64()
        ),
        (Some(60), Some(2))
    );
    assert_eq!(report["settings"]["train_triples"], 120);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn malformed_input_is_a_clear_error() {
    let dir = scratch("kge", "bad");
    let d = dir.to_str().unwrap();
    let base = ["train", "kge", "--mode", "single", "--data", d];
    std::fs::write(dir.join("train.del"), "0\t0\t1\n1\t0\n").unwrap();
    std::fs::write(dir.join("valid.del"), "").unwrap();
    let err = fails(&base);
    assert!(err.contains("test.del is missing"), "{err}");
    std::fs::write(dir.join("test.del"), "0\t0\t1\n").unwrap();
    let err = fails(&base);
    assert!(
        err.contains("train.del:2") && err.contains("expected 3"),
        "{err}"
    );
    std::fs::write(dir.join("train.del"), "0\t0\t1\n1\tzero\t2\n").unwrap();
    let err = fails(&base);
    assert!(
        err.contains("train.del:2") && err.contains("\"zero\""),
        "{err}"
    );
    std::fs::write(dir.join("train.del"), "0\t0\t1\n").unwrap();
    std::fs::write(dir.join("test.del"), "\n\n").unwrap();
    let err = fails(&base);
    assert!(err.contains("no test triples"), "{err}");

    // Bad flags (split at blanks): each refused with an error that names every needle.
    for (flags, needles) in [
        (
            "--mode adapm --schedule buckets --bucket-pool=-1",
            &["--bucket-pool"][..],
        ),
        (
            "--mode single --data /nonexistent/kge",
            &["/nonexistent/kge", "not a directory"][..],
        ),
        (
            "--mode single --synthetic entities=10,colour=blue",
            &["unknown key \"colour\""][..],
        ),
        (
            "--mode single --synthetic entities=ten",
            &["entities", "\"ten\""][..],
        ),
        ("--mode single --dim 0", &["--dim"][..]),
        ("--mode single --eta NaN", &["--eta"][..]),
        ("--mode nups --sync-every-ms 0", &["--sync-every-ms"][..]),
        (
            "--mode nups --replicate-alpha 2 --replicate-top 3",
            &["--replicate-top"][..],
        ),
        (
            "--mode adapm --sampling preloc",
            &["only --sampling naive, local or local:next"][..],
        ),
        (
            "--mode adapm --schedule buckets --sampling local",
            &["takes no --sampling"][..],
        ),
        (
            "--mode lapse --intent-ahead 10",
            &["--intent-ahead applies to mode adapm"][..],
        ),
    ] {
        let mut args = vec!["train", "kge"];
        args.extend(flags.split_whitespace());
        let err = fails(&args);
        for needle in needles {
            assert!(err.contains(needle), "{flags}: {err}");
        }
    }
    for bad in ["pool", "pool:0", "pool:4:loose", "preloc:2", "uniform", ""] {
        let err = fails(&["train", "kge", "--mode", "nups", "--sampling", bad]);
        assert!(
            err.contains("--sampling") && err.contains("unknown sampling scheme"),
            "--sampling {bad:?}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
