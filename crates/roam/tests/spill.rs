//! Spill files end to end over TCP (issue #17): nodes under dynamic allocation with a row
//! budget far below the ids they train, evicted rows spilled to a file per node. Checked: every
//! id reads back its initial row minus every SGD step any node gave it (nothing lost across
//! evictions), no node above its budget plus its relocations in, created − evicted = held; a
//! checkpoint taken with spilled rows restores every row bit-exactly, into another node count,
//! with every node within its budget after the restore; the manifest lists every spill file
//! with its size and CRC-32, and a listed file that is missing, truncated or damaged fails the
//! start naming the file; a manifest without the list (an earlier roam's) restores as before,
//! its records' own checksums still checked; spill without a directory fails the start.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::cluster;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use roam::{Admission, Allocation, Config, DynamicPolicy, Initializer, NodeHandle, Optimizer};

const LEN: usize = 4;
const BUDGET: u64 = 16;
const IDS: u64 = 120;
const STEP: f32 = 0.25;

fn init() -> Initializer {
    Initializer::Uniform {
        low: -0.5,
        high: 0.5,
        seed: 7,
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roam-spill-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn config(spill_dir: &Path) -> Config {
    let mut cfg = Config::dynamic(
        LEN as u32,
        DynamicPolicy {
            admission: Admission::All,
            max_rows: Some(BUDGET),
            spill: true,
            ..DynamicPolicy::default()
        },
    );
    cfg.allocation = Allocation::Dynamic;
    cfg.initializer = init();
    cfg.optimizer = Some(Optimizer::sgd(1.0));
    cfg.spill_dir = Some(spill_dir.to_path_buf());
    cfg.print_stats = false;
    cfg
}

/// The ids' values, pulled by `w`.
fn pull_all(w: &roam::Worker) -> Vec<f32> {
    let ids: Vec<u64> = (0..IDS).collect();
    let mut out = vec![0.0; ids.len() * LEN];
    w.pull(&ids, &mut out).unwrap().wait().unwrap();
    out
}

fn shutdown(nodes: Vec<NodeHandle>) {
    std::thread::scope(|scope| {
        for node in nodes {
            scope.spawn(move || node.shutdown().unwrap());
        }
    });
}

/// The budget (plus relocations in) at every node, no spill error; with `fresh` (no restore:
/// restored rows are held without being created), created − evicted = held.
fn check_budget(nodes: &[NodeHandle], fresh: bool) {
    let stats: Vec<_> = nodes.iter().map(|n| n.stats()).collect();
    for (rank, s) in stats.iter().enumerate() {
        assert!(
            s.keys_held <= BUDGET + s.relocations_in,
            "node {rank}: {} rows, budget {BUDGET}, {} relocated in",
            s.keys_held,
            s.relocations_in
        );
        assert_eq!(s.spill_errors, 0, "node {rank}");
    }
    let created: u64 = stats.iter().map(|s| s.keys_created).sum();
    let evicted: u64 = stats.iter().map(|s| s.rows_evicted).sum();
    let held: u64 = stats.iter().map(|s| s.keys_held).sum();
    if fresh {
        assert_eq!(created - evicted, held, "created − evicted = held");
    }
}

/// Trains `IDS` ids on `nodes` nodes with a budget of `BUDGET` rows each (ids drawn at random,
/// a few localized), then checks every id against its steps and checkpoints into `ckpt`.
/// Returns the values pulled before the checkpoint.
fn train_and_checkpoint(nodes: u32, spill: &Path, ckpt: &Path) -> Vec<f32> {
    let seed = 31;
    println!("seed {seed} (replay: this test with that seed)");
    let handles = cluster(nodes, || config(spill));
    let done: Vec<(BTreeMap<u64, u32>, Vec<f32>)> = std::thread::scope(|scope| {
        let threads: Vec<_> = handles
            .iter()
            .map(|node| {
                scope.spawn(move || {
                    let w = node.worker(0).unwrap();
                    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ node.rank() as u64);
                    let mut steps = BTreeMap::<u64, u32>::new();
                    for step in 0..80 {
                        let mut ids: Vec<u64> = (0..6).map(|_| rng.random_range(0..IDS)).collect();
                        ids.sort_unstable();
                        ids.dedup();
                        let mut out = vec![0.0; ids.len() * LEN];
                        w.pull(&ids, &mut out).unwrap().wait().unwrap();
                        w.push_gradients(&ids, &vec![STEP; ids.len() * LEN])
                            .unwrap()
                            .wait()
                            .unwrap();
                        for &id in &ids {
                            *steps.entry(id).or_default() += 1;
                        }
                        if step % 7 == 0 {
                            w.localize(&ids[..1]).unwrap().wait().unwrap();
                        }
                    }
                    w.barrier().unwrap();
                    let values = if node.rank() == 0 {
                        pull_all(&w)
                    } else {
                        Vec::new()
                    };
                    w.barrier().unwrap();
                    w.checkpoint(ckpt).unwrap();
                    (steps, values)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let (steps, mut values): (Vec<_>, Vec<_>) = done.into_iter().unzip();
    let values = values.swap_remove(0);
    let mut row = [0.0; LEN];
    for id in 0..IDS {
        let n: u32 = steps.iter().filter_map(|s| s.get(&id)).sum();
        init().fill(id, &mut row);
        for j in 0..LEN {
            let want = row[j] - STEP * n as f32;
            let got = values[id as usize * LEN + j];
            assert!(
                (got - want).abs() < 1e-3,
                "id {id}: read {got}, its {n} steps from {} give {want}",
                row[j]
            );
        }
    }
    check_budget(&handles, true);
    let stats: Vec<_> = handles.iter().map(|n| n.stats()).collect();
    assert_eq!(stats.iter().map(|s| s.grads_dropped).sum::<u64>(), 0);
    let unspilled: u64 = stats.iter().map(|s| s.rows_unspilled).sum();
    assert!(
        unspilled > 0,
        "rows must come back from the spill: {stats:?}"
    );
    let spill_files = std::fs::read_dir(ckpt)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("spill-"))
        .count();
    assert_eq!(spill_files, nodes as usize, "one spill file per node");
    let manifest = roam::checkpoint::manifest_of(ckpt).unwrap();
    let listed = manifest
        .spill_files
        .expect("the manifest lists the spill files");
    assert_eq!(
        listed.iter().map(|f| f.rank).collect::<Vec<_>>(),
        (0..nodes).collect::<Vec<_>>()
    );
    for f in &listed {
        let bytes = std::fs::read(ckpt.join(&f.file)).unwrap();
        assert_eq!(bytes.len() as u64, f.bytes, "{}", f.file);
        assert_eq!(crc32fast::hash(&bytes), f.crc32, "{}", f.file);
    }
    shutdown(handles);
    values
}

#[test]
fn spilled_rows_come_back_trained_and_a_checkpoint_restores_them_bit_exactly() {
    let dir = scratch("round-trip");
    let ckpt = dir.join("ckpt");
    let before = train_and_checkpoint(2, &dir.join("spill-a"), &ckpt);
    // Restored into 3 nodes with a fresh spill directory: every row equals the one pulled
    // before the checkpoint, bit for bit, and every node is within its budget.
    let spill = dir.join("spill-b");
    let handles = cluster(3, || config(&spill).restore_from(&ckpt));
    for (rank, node) in handles.iter().enumerate() {
        let s = node.stats();
        assert!(s.keys_held <= BUDGET, "node {rank} holds {}", s.keys_held);
    }
    let after = pull_all(&handles[1].worker(0).unwrap());
    for id in 0..IDS as usize {
        let (a, b) = (&before[id * LEN..][..LEN], &after[id * LEN..][..LEN]);
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "id {id}: {a:?} before the checkpoint, {b:?} after the restore"
        );
    }
    check_budget(&handles, false);
    shutdown(handles);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A one-node start from checkpoint `ckpt`.
fn restart(spill_dir: &Path, ckpt: &Path) -> Result<NodeHandle, roam::StartError> {
    let mut cfg = config(spill_dir).restore_from(ckpt);
    cfg.cluster = roam::cluster_env::ClusterOverrides {
        rank: Some(0),
        num_nodes: Some(1),
        coordinator: None,
    };
    NodeHandle::start(cfg)
}

/// The error of a one-node start from checkpoint `ckpt` that must be refused.
fn restart_refused(spill_dir: &Path, ckpt: &Path) -> String {
    let err = restart(spill_dir, ckpt).err().expect("refused").to_string();
    println!("refused: {err}");
    err
}

/// A one-node restart from `ckpt` restores `before` bit-exactly.
fn restart_restores(spill_dir: &Path, ckpt: &Path, before: &[f32]) {
    let node = restart(spill_dir, ckpt).unwrap();
    let after = pull_all(&node.worker(0).unwrap());
    assert_eq!(
        before.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        after.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    shutdown(vec![node]);
}

/// The checkpoint's only spill file (a one-node checkpoint) and its bytes.
fn only_spill_file(ckpt: &Path) -> (PathBuf, Vec<u8>) {
    let file = std::fs::read_dir(ckpt)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("spill-")
        })
        .unwrap();
    let bytes = std::fs::read(&file).unwrap();
    // After the 8-byte magic and the first record's 16-byte header, its values.
    assert!(bytes.len() > 8 + 16 + 4, "the checkpoint has spilled rows");
    (file, bytes)
}

#[test]
fn a_missing_truncated_or_damaged_spill_file_in_a_checkpoint_fails_the_start_naming_it() {
    let dir = scratch("damaged");
    let ckpt = dir.join("ckpt");
    let before = train_and_checkpoint(1, &dir.join("spill-a"), &ckpt);
    let (file, bytes) = only_spill_file(&ckpt);
    let name = file.display().to_string();
    // A flipped bit of the first record's values: the file's CRC-32 differs from the listed.
    let mut flipped = bytes.clone();
    flipped[8 + 16 + 2] ^= 0x40;
    std::fs::write(&file, &flipped).unwrap();
    let err = restart_refused(&dir.join("spill-b"), &ckpt);
    assert!(
        err.contains(&name) && err.contains("spill file checksum mismatch"),
        "{err}"
    );
    // Truncated mid-record, and to its magic alone (on its own, a valid spill file of no rows).
    std::fs::write(&file, &bytes[..bytes.len() - 3]).unwrap();
    let err = restart_refused(&dir.join("spill-b"), &ckpt);
    assert!(
        err.contains(&name) && err.contains("wrong length (truncated)"),
        "{err}"
    );
    std::fs::write(&file, &bytes[..8]).unwrap();
    let err = restart_refused(&dir.join("spill-b"), &ckpt);
    assert!(
        err.contains(&name) && err.contains("wrong length (truncated)"),
        "{err}"
    );
    // Deleted: never restored as "no spill".
    std::fs::remove_file(&file).unwrap();
    let err = restart_refused(&dir.join("spill-b"), &ckpt);
    assert!(
        err.contains(&name) && err.contains("spill file missing"),
        "{err}"
    );
    // The file put back, the checkpoint restores (what failed above was the damage)...
    std::fs::write(&file, &bytes).unwrap();
    // ...unless its manifest entry names another file (here one outside the checkpoint).
    let path = ckpt.join(roam::checkpoint::MANIFEST);
    let original = std::fs::read(&path).unwrap();
    let mut manifest: serde_json::Value = serde_json::from_slice(&original).unwrap();
    manifest["spill_files"][0]["file"] = "../spill-1-0-of-1.bin".into();
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    let err = restart_refused(&dir.join("spill-b"), &ckpt);
    assert!(
        err.contains("is not a spill file of this checkpoint"),
        "{err}"
    );
    std::fs::write(&path, &original).unwrap();
    restart_restores(&dir.join("spill-b"), &ckpt, &before);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A manifest written before the spill-file list (accepted as before, with a warning; see
/// `checkpoint/spill.rs`): its spill files, found by name, restore, and a damaged record of
/// one still fails the start naming the file and the offset.
#[test]
fn a_checkpoint_without_the_spill_file_list_restores_as_before() {
    let dir = scratch("unlisted");
    let ckpt = dir.join("ckpt");
    let before = train_and_checkpoint(1, &dir.join("spill-a"), &ckpt);
    let path = ckpt.join(roam::checkpoint::MANIFEST);
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert!(
        manifest
            .as_object_mut()
            .unwrap()
            .remove("spill_files")
            .is_some()
    );
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    assert_eq!(
        roam::checkpoint::manifest_of(&ckpt).unwrap().spill_files,
        None
    );
    restart_restores(&dir.join("spill-b"), &ckpt, &before);
    let (file, mut bytes) = only_spill_file(&ckpt);
    bytes[8 + 16 + 2] ^= 0x40;
    std::fs::write(&file, &bytes).unwrap();
    let err = restart_refused(&dir.join("spill-b"), &ckpt);
    assert!(
        err.contains(&file.display().to_string()) && err.contains("offset 8: bad checksum"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn spill_without_a_directory_fails_the_start() {
    let mut cfg = config(Path::new("/unused"));
    cfg.spill_dir = None;
    cfg.cluster = roam::cluster_env::ClusterOverrides {
        rank: Some(0),
        num_nodes: Some(1),
        coordinator: None,
    };
    let err = NodeHandle::start(cfg).err().expect("refused").to_string();
    assert!(err.contains("no spill directory"), "{err}");
}

/// Named tables: a spilling table keeps its rows' optimizer state across evictions (Adagrad
/// rows end bit-exactly at a sequential reference) and through a checkpoint into 2 nodes; a
/// table without spill beside it evicts without spilling.
#[test]
fn a_spilling_table_keeps_optimizer_state_across_evictions_and_checkpoints() {
    use roam::TableSpec;
    const ITEMS: u64 = 30;
    const ROUNDS: usize = 6;
    let dir = scratch("tables");
    let item = || {
        let policy = DynamicPolicy {
            max_rows: Some(5),
            spill: true,
            ..DynamicPolicy::default()
        };
        TableSpec::dynamic("item", 3, policy)
            .with_optimizer(Optimizer::adagrad(0.1))
            .with_initializer(init())
    };
    let plain = || {
        let policy = DynamicPolicy {
            max_rows: Some(4),
            ..DynamicPolicy::default()
        };
        TableSpec::dynamic("plain", 8, policy)
    };
    let config = |spill: &Path| {
        let mut cfg = Config::tables(vec![item(), plain()]);
        cfg.allocation = Allocation::Dynamic;
        cfg.spill_dir = Some(spill.to_path_buf());
        cfg.print_stats = false;
        cfg
    };
    let gradient = |id: u64, round: usize| -> Vec<f32> {
        (0..3)
            .map(|j| ((id * 7 + round as u64 * 3 + j) % 11) as f32 - 5.0)
            .collect()
    };
    let ids: Vec<u64> = (0..ITEMS).map(|i| i * 1_000_003).collect();
    let ckpt = dir.join("ckpt");
    let spill_a = dir.join("spill-a");
    let nodes = cluster(1, || config(&spill_a));
    let want = {
        let w = nodes[0].worker(0).unwrap();
        let items = w.table("item").unwrap();
        let plains = w.table("plain").unwrap();
        for round in 0..ROUNDS {
            for &id in &ids {
                items
                    .push_gradients(&[id], &gradient(id, round))
                    .unwrap()
                    .wait()
                    .unwrap();
                plains.push(&[id], &[1.0; 8]).unwrap().wait().unwrap();
            }
        }
        let mut want = Vec::new();
        let spec = item();
        let opt = spec.optimizer.unwrap();
        for &id in &ids {
            let key = items.key(id).unwrap();
            let mut record = spec.initializer.record(key, 3, opt.layout().record_len(3));
            for round in 0..ROUNDS {
                let (v, state) = record.split_at_mut(3);
                opt.step(v, state, &gradient(id, round));
            }
            want.extend_from_slice(&record[..3]);
        }
        let mut got = vec![0.0; ids.len() * 3];
        items.pull(&ids, &mut got).unwrap().wait().unwrap();
        assert_eq!(
            got, want,
            "every item row, Adagrad state kept through evictions"
        );
        let s = nodes[0].stats();
        assert!(s.keys_held <= 5 + 4, "{s:?}");
        assert!(
            s.rows_spilled > 0 && s.rows_spilled < s.rows_evicted,
            "{s:?}"
        );
        w.checkpoint(&ckpt).unwrap();
        want
    };
    shutdown(nodes);
    let spill_b = dir.join("spill-b");
    let nodes = cluster(2, || config(&spill_b).restore_from(&ckpt));
    {
        let w = nodes[1].worker(0).unwrap();
        let items = w.table("item").unwrap();
        let mut after = vec![0.0; ids.len() * 3];
        items.pull(&ids, &mut after).unwrap().wait().unwrap();
        assert_eq!(
            after, want,
            "restored bit-exactly from shards and spill files"
        );
    }
    shutdown(nodes);
    let _ = std::fs::remove_dir_all(&dir);
}
