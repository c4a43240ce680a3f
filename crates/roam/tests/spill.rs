//! Spill files end to end over TCP (issue #17): nodes under dynamic allocation with a row
//! budget far below the ids they train, evicted rows spilled to a file per node. Checked: every
//! id reads back its initial row minus every SGD step any node gave it (nothing lost across
//! evictions), no node above its budget plus its relocations in, created − evicted = held; a
//! checkpoint taken with spilled rows restores every row bit-exactly, into another node count,
//! with every node within its budget after the restore; a damaged spill file in a checkpoint
//! fails the start naming the file and the offset; spill without a directory fails the start.

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

#[test]
fn a_damaged_spill_file_in_a_checkpoint_fails_the_start_naming_it() {
    let dir = scratch("damaged");
    let ckpt = dir.join("ckpt");
    train_and_checkpoint(1, &dir.join("spill-a"), &ckpt);
    let file = std::fs::read_dir(&ckpt)
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
    // Flip a byte of the first record's values (after the 8-byte magic and 16-byte header).
    let mut bytes = std::fs::read(&file).unwrap();
    assert!(bytes.len() > 8 + 16 + 4, "the checkpoint has spilled rows");
    bytes[8 + 16 + 2] ^= 0x40;
    std::fs::write(&file, &bytes).unwrap();
    let mut cfg = config(&dir.join("spill-b")).restore_from(&ckpt);
    cfg.cluster = roam::cluster_env::ClusterOverrides {
        rank: Some(0),
        num_nodes: Some(1),
        coordinator: None,
    };
    let err = NodeHandle::start(cfg).err().expect("refused").to_string();
    assert!(
        err.contains(&file.display().to_string()) && err.contains("offset 8: bad checksum"),
        "{err}"
    );
    // A truncated one too.
    bytes[8 + 16 + 2] ^= 0x40;
    std::fs::write(&file, &bytes[..bytes.len() - 3]).unwrap();
    let mut cfg = config(&dir.join("spill-b")).restore_from(&ckpt);
    cfg.cluster = roam::cluster_env::ClusterOverrides {
        rank: Some(0),
        num_nodes: Some(1),
        coordinator: None,
    };
    let err = NodeHandle::start(cfg).err().expect("refused").to_string();
    assert!(err.contains("truncated"), "{err}");
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
