//! Multi-process tests over real TCP: `roam launch` starts node processes of the `roam` binary
//! on loopback, and the self-checks verify exact results (see `roam check --help`).

mod common;

use common::{launch, node_stats, sum};

#[test]
fn concurrent_increments_to_one_key_with_a_relocating_worker_are_exact() {
    // The Lapse acceptance test: 3 nodes x 2 workers push (1, 2) 100 000 times each while one
    // worker localizes the key every 1 000 operations.
    let out = launch(
        3,
        2,
        &[
            "check",
            "increments",
            "--ops",
            "100000",
            "--localize-every",
            "1000",
            "--localizers",
            "1",
        ],
    );
    assert!(
        out.contains("6 workers x 100000 ops on 1 keys verified exactly"),
        "{out}"
    );
    let stats = node_stats(&out);
    assert_eq!(stats.len(), 3, "{out}");
    assert!(
        sum(&stats, "relocations_in") >= 1,
        "the key must have moved: {out}"
    );
    assert_eq!(sum(&stats, "anomalies"), 0, "{out}");
}

#[test]
fn concurrent_increments_with_random_localizes_on_many_keys_are_exact() {
    let out = launch(
        3,
        2,
        &[
            "check",
            "increments",
            "--keys",
            "40",
            "--ops",
            "20000",
            "--localize-every",
            "50",
        ],
    );
    assert!(out.contains("verified exactly"), "{out}");
    let stats = node_stats(&out);
    assert_eq!(
        sum(&stats, "relocations_in"),
        sum(&stats, "relocations_out"),
        "{out}"
    );
    assert!(sum(&stats, "relocations_in") > 100, "{out}");
    assert!(sum(&stats, "forwards") > 0, "{out}");
}

#[test]
fn increments_are_exact_with_location_caches_and_synchronous_pushes() {
    let out = launch(
        2,
        2,
        &[
            "check",
            "increments",
            "--keys",
            "8",
            "--ops",
            "5000",
            "--localize-every",
            "20",
            "--location-caches",
            "--window",
            "1",
        ],
    );
    assert!(out.contains("verified exactly"), "{out}");
    assert!(sum(&node_stats(&out), "cache_hits") > 0, "{out}");
}

#[test]
fn increments_are_exact_in_every_static_mode() {
    for extra in [
        &["--allocation", "static-range"][..],
        &["--allocation", "static-hash"],
        &["--allocation", "static-hash", "--no-fast-local-access"],
    ] {
        let mut args = vec!["check", "increments", "--keys", "16", "--ops", "5000"];
        args.extend_from_slice(extra);
        let out = launch(2, 2, &args);
        assert!(out.contains("verified exactly"), "{extra:?}: {out}");
        let stats = node_stats(&out);
        assert_eq!(
            sum(&stats, "relocations_in"),
            0,
            "static modes never move keys: {out}"
        );
        if extra.contains(&"--no-fast-local-access") {
            assert_eq!(
                sum(&stats, "local_push_keys"),
                0,
                "every access goes through messages: {out}"
            );
        }
    }
}

#[test]
fn dynamic_mode_without_fast_local_access_is_exact() {
    let out = launch(
        2,
        2,
        &[
            "check",
            "increments",
            "--keys",
            "8",
            "--ops",
            "5000",
            "--localize-every",
            "100",
            "--no-fast-local-access",
        ],
    );
    assert!(out.contains("verified exactly"), "{out}");
}

#[test]
fn a_vanished_peer_fails_waiting_operations_instead_of_hanging() {
    let out = launch(3, 1, &["check", "peer-loss", "--peer-timeout", "2"]);
    assert_eq!(out.matches("saw node 2 gone").count(), 2, "{out}");
}

#[test]
fn the_demo_job_launches_itself_and_trains() {
    // Outside a cluster, `roam demo` launches `train mf --mode lapse` on 2 nodes itself. Off a
    // terminal it prints rank 0's per-epoch lines (no JSON), then what ran and what next.
    let out = common::run(&["demo", "--nodes", "2", "--workers-per-node", "1"]);
    assert!(
        common::json_lines(&out).is_empty(),
        "JSON in the demo: {out}"
    );
    let epochs: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("[node 0] epoch "))
        .collect();
    assert_eq!(epochs.len(), 30, "{out}");
    assert!(
        epochs[29].starts_with("[node 0] epoch 30/30 ")
            && epochs[29].contains(" loss ")
            && epochs[29].contains(" test_rmse ")
            && epochs[29].contains(" local "),
        "{out}"
    );
    assert!(
        !out.contains("[node 1] epoch"),
        "only rank 0 reports: {out}"
    );
    let tail: Vec<&str> = out.lines().rev().take(2).collect();
    assert!(
        tail[1].starts_with("ran: ")
            && tail[1].contains("lapse mode")
            && tail[1].contains("2 local node")
            && tail[1].contains("embedded synthetic matrix"),
        "{out}"
    );
    assert!(
        tail[0].starts_with("next: ") && tail[0].contains(" plot "),
        "{out}"
    );
}

#[test]
fn bench_ops_reports_every_figure() {
    let out = launch(
        2,
        1,
        &[
            "bench",
            "ops",
            "--keys",
            "1000",
            "--seconds",
            "0.2",
            "--batch",
            "10",
        ],
    );
    let json = common::json_with(&out, "bench", "ops");
    for field in [
        "local_pull_keys_per_s",
        "local_push_keys_per_s",
        "remote_pull_keys_per_s",
        "remote_push_keys_per_s",
        "remote_pull_p50_us",
        "remote_pull_p99_us",
    ] {
        assert!(
            json[field].as_f64().is_some_and(|v| v > 0.0),
            "{field} missing or zero: {json}"
        );
    }
}
