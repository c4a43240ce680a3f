//! Checkpoints over TCP (real nodes on loopback): a checkpoint taken while keys were moved
//! holds every push issued before it and none after; it restores into any node count 1–4 and
//! back with identical records, and identical shard files at the same node count; a damaged
//! checkpoint (truncated shard, flipped byte, missing manifest, another key space) is refused
//! with an error naming the file; an interrupted checkpoint leaves the previous one intact.
//! Shards are read here with a minimal safetensors parser of the test's own, as a user
//! without roam would.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use common::cluster;
use roam::checkpoint::RestoreError;
use roam::{Allocation, Config, NodeHandle, StartError};
use roam::{RecordLayout, ValueLengths};

const KEYS: u64 = 240;
const WORKERS: u32 = 2;

/// Records by key, as read from a checkpoint's shards.
type Records = BTreeMap<u64, Vec<f32>>;

/// The configuration of every run: per-key lengths (1–3), one hidden value per key, some
/// replicated keys, dynamic allocation.
fn config(per_key: bool) -> Config {
    let lengths = if per_key {
        ValueLengths::PerKey(
            (0..KEYS)
                .map(|k| 1 + (k % 3) as u32)
                .collect::<Vec<_>>()
                .into(),
        )
    } else {
        ValueLengths::Uniform(4)
    };
    let mut cfg = Config::new(KEYS, 1).replicate([3, 100, 201]);
    cfg.value_lengths = lengths;
    cfg.record_layout = RecordLayout {
        hidden_per_value: 0,
        hidden_per_key: 1,
    };
    cfg.workers_per_node = Some(WORKERS);
    cfg.allocation = Allocation::Dynamic;
    cfg
}

fn len_of(per_key: bool, key: u64) -> usize {
    if per_key { 1 + (key % 3) as usize } else { 4 }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roam-ckpt-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `body(node, worker)` on every worker of every node.
fn on_every_worker(nodes: &[NodeHandle], body: impl Fn(&NodeHandle, &roam::Worker) + Sync) {
    std::thread::scope(|scope| {
        for node in nodes {
            for w in 0..WORKERS {
                let body = &body;
                scope.spawn(move || body(node, &node.worker(w).unwrap()));
            }
        }
    });
}

fn shutdown(nodes: Vec<NodeHandle>) {
    std::thread::scope(|scope| {
        for node in nodes {
            scope.spawn(move || node.shutdown().unwrap());
        }
    });
}

/// Trains on `n` nodes (pushes, localizes, a checkpoint into `dir` at epoch 3, more pushes);
/// returns the sums of the pushes before the checkpoint.
fn train(n: u32, per_key: bool, dir: &Path) -> Records {
    let nodes = cluster(n, || config(per_key));
    // Worker (r, w) pushes `1 + (r + w + i) % 3` to every value of key `(7 i + r + w) % KEYS`.
    let mut expected: Records = (0..KEYS)
        .map(|k| (k, vec![0.0; len_of(per_key, k)]))
        .collect();
    for r in 0..n {
        for w in 0..WORKERS {
            for i in 0..200u64 {
                let key = (7 * i + u64::from(r + w)) % KEYS;
                let v = (1 + (u64::from(r + w) + i) % 3) as f32;
                expected
                    .get_mut(&key)
                    .unwrap()
                    .iter_mut()
                    .for_each(|x| *x += v);
            }
        }
    }
    on_every_worker(&nodes, |node, w| {
        let (r, id) = (node.rank(), w.id());
        for i in 0..200u64 {
            let key = (7 * i + u64::from(r + id)) % KEYS;
            if i % 5 == 0 {
                // Keys move while others push to them: some are in transit at the call.
                w.localize(&[key]).unwrap().detach();
            }
            let v = (1 + (u64::from(r + id) + i) % 3) as f32;
            let vals = vec![v; len_of(per_key, key)];
            w.push(&[key], &vals).unwrap().detach();
        }
        w.checkpoint_with(dir, 3, serde_json::json!({"lr": 0.5}))
            .unwrap();
        // Pushes after the call are in no checkpoint.
        for key in 0..KEYS {
            w.push(&[key], &vec![1000.0; len_of(per_key, key)])
                .unwrap()
                .detach();
        }
        w.wait_all().unwrap();
    });
    shutdown(nodes);
    expected
}

/// Starts `m` nodes from `from`, checks that every worker reads the checkpoint's values of
/// every key (replicated ones from its own node's replica), and checkpoints them straight
/// into `to`.
fn restore_and_checkpoint(m: u32, per_key: bool, from: &Path, to: &Path) {
    let records = read_records(from);
    let nodes = cluster(m, || config(per_key).restore_from(from));
    on_every_worker(&nodes, |_, w| {
        for (&key, record) in &records {
            let mut out = vec![0.0f32; len_of(per_key, key)];
            w.pull(&[key], &mut out).unwrap().wait().unwrap();
            assert_eq!(out[..], record[..out.len()], "key {key} after the restore");
        }
        w.checkpoint_with(to, 3, serde_json::Value::Null).unwrap()
    });
    shutdown(nodes);
}

/// The manifest's shard files, in rank order.
fn shard_files(dir: &Path) -> Vec<PathBuf> {
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    manifest["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| dir.join(s["file"].as_str().unwrap()))
        .collect()
}

/// A minimal safetensors reader: the records of every shard, checking no key appears twice.
fn read_records(dir: &Path) -> Records {
    let mut out = Records::new();
    for path in shard_files(dir) {
        let bytes = fs::read(&path).unwrap();
        let hlen = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + hlen]).unwrap();
        let data = &bytes[8 + hlen..];
        let tensor = |name: &str| -> &[u8] {
            let o = &header[name]["data_offsets"];
            &data[o[0].as_u64().unwrap() as usize..o[1].as_u64().unwrap() as usize]
        };
        let keys: Vec<u64> = tensor("keys")
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let values: Vec<f32> = tensor("values")
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let bounds: Vec<usize> = if header.get("offsets").is_some() {
            tensor("offsets")
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()) as usize)
                .collect()
        } else {
            let r = header["values"]["shape"][1].as_u64().unwrap() as usize;
            (0..=keys.len()).map(|i| i * r).collect()
        };
        for (i, key) in keys.iter().enumerate() {
            let record = values[bounds[i]..bounds[i + 1]].to_vec();
            assert!(
                out.insert(*key, record).is_none(),
                "key {key} in two shards"
            );
        }
    }
    out
}

/// The visible values of every record (records end with one hidden value).
fn visible(records: &Records) -> Records {
    records
        .iter()
        .map(|(&k, r)| (k, r[..r.len() - 1].to_vec()))
        .collect()
}

fn files(dir: &Path) -> Vec<Vec<u8>> {
    shard_files(dir)
        .iter()
        .map(|p| fs::read(p).unwrap())
        .collect()
}

fn round_trip(n: u32, m: u32, per_key: bool) {
    let tag = format!("{n}-{m}-{per_key}");
    let (a, b, c, d) = (
        scratch(&format!("{tag}-a")),
        scratch(&format!("{tag}-b")),
        scratch(&format!("{tag}-c")),
        scratch(&format!("{tag}-d")),
    );
    let expected = train(n, per_key, &a);
    let taken = read_records(&a);
    let manifest = roam::checkpoint::manifest_of(&a).unwrap();
    assert_eq!(
        (manifest.epoch, manifest.num_nodes),
        (3, n),
        "{tag}: manifest"
    );
    assert_eq!(
        manifest.app,
        serde_json::json!({"lr": 0.5}),
        "{tag}: the app's state"
    );
    assert_eq!(
        visible(&taken),
        expected,
        "{tag}: the cut holds exactly the pushes before it"
    );
    assert!(
        taken.values().all(|r| r.last() == Some(&0.0)),
        "{tag}: hidden state"
    );
    restore_and_checkpoint(m, per_key, &a, &b);
    restore_and_checkpoint(n, per_key, &b, &c);
    restore_and_checkpoint(m, per_key, &c, &d);
    assert_eq!(read_records(&b), taken, "{tag}: {n} into {m} nodes");
    assert_eq!(read_records(&c), taken, "{tag}: and back into {n}");
    assert_eq!(
        files(&b),
        files(&d),
        "{tag}: identical shard files at {m} nodes"
    );
    assert_eq!(shard_files(&b).len(), m as usize);
    for dir in [a, b, c, d] {
        fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn checkpoints_restore_into_any_node_count_bit_exactly() {
    for n in 1..=4 {
        for m in 1..=4 {
            round_trip(n, m, (n + m) % 2 == 0);
        }
    }
}

/// A one-node checkpoint of the uniform configuration in a fresh directory.
fn small_checkpoint(name: &str) -> PathBuf {
    let dir = scratch(name);
    train(1, false, &dir);
    dir
}

fn restore_error(dir: &Path, cfg: Config) -> RestoreError {
    let mut cfg = cfg.restore_from(dir);
    cfg.cluster = roam::cluster_env::ClusterOverrides {
        rank: Some(0),
        num_nodes: Some(1),
        coordinator: None,
    };
    match NodeHandle::start(cfg) {
        Err(StartError::Restore(e)) => e,
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a damaged checkpoint was restored"),
    }
}

fn only_shard(dir: &Path) -> PathBuf {
    shard_files(dir).pop().unwrap()
}

#[test]
fn a_truncated_shard_is_refused_naming_it() {
    let dir = small_checkpoint("truncated");
    let shard = only_shard(&dir);
    let len = fs::metadata(&shard).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    let e = restore_error(&dir, config(false));
    let text = e.to_string();
    assert!(
        matches!(&e, RestoreError::Shard { path, .. } if *path == shard),
        "{text}"
    );
    assert!(text.contains("truncated"), "{text}");
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_flipped_byte_is_refused_naming_the_shard() {
    let dir = small_checkpoint("flipped");
    let shard = only_shard(&dir);
    let mut bytes = fs::read(&shard).unwrap();
    let at = bytes.len() - 7; // inside the values
    bytes[at] ^= 0x10;
    fs::write(&shard, &bytes).unwrap();
    let e = restore_error(&dir, config(false));
    let text = e.to_string();
    assert!(
        matches!(&e, RestoreError::Shard { path, .. } if *path == shard),
        "{text}"
    );
    assert!(text.contains("checksum"), "{text}");
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_missing_manifest_means_no_checkpoint() {
    let dir = small_checkpoint("no-manifest");
    fs::remove_file(dir.join("manifest.json")).unwrap();
    let e = restore_error(&dir, config(false));
    assert!(
        matches!(&e, RestoreError::MissingManifest { path } if path.ends_with("manifest.json")),
        "{e}"
    );
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_checkpoint_of_another_key_space_is_refused() {
    let dir = small_checkpoint("other-space");
    let mut other = config(false);
    other.num_keys = KEYS + 1;
    let e = restore_error(&dir, other);
    assert!(matches!(&e, RestoreError::KeySpace { .. }), "{e}");
    assert!(e.to_string().contains("manifest.json"), "{e}");
    let e = restore_error(&dir, config(true));
    assert!(matches!(&e, RestoreError::KeySpace { .. }), "{e}");
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_interrupted_checkpoint_leaves_the_previous_one_intact() {
    let dir = small_checkpoint("interrupted");
    let before = read_records(&dir);
    let old = only_shard(&dir);
    // What a crash mid-write leaves: the next id's shard (partial) and its temporary file,
    // no new manifest.
    let next = dir.join(
        old.file_name()
            .unwrap()
            .to_string_lossy()
            .replace("ckpt-000001", "ckpt-000002"),
    );
    fs::write(&next, b"partial").unwrap();
    fs::write(next.with_extension("safetensors.tmp"), b"partial").unwrap();
    let nodes = cluster(1, || config(false).restore_from(&dir));
    // A complete next checkpoint replaces it, and the old shard and the leftovers go.
    on_every_worker(&nodes, |node, w| {
        if node.rank() == 0 && w.id() == 0 {
            let mut out = [0.0f32; 4];
            w.pull(&[7], &mut out).unwrap().wait().unwrap();
            assert_eq!(
                out.to_vec(),
                before[&7][..4].to_vec(),
                "restored from the previous one"
            );
        }
        w.checkpoint(&dir).unwrap();
    });
    shutdown(nodes);
    assert_eq!(read_records(&dir), before);
    assert!(
        !old.exists(),
        "the previous shard is deleted once the new manifest is in"
    );
    let names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "manifest and one shard: {names:?}");
    fs::remove_dir_all(dir).unwrap();
}

/// A sparse key space (keys created where first used, stores in creation order) under
/// dynamic allocation: 2 nodes into 3 and back, records and files as for dense keys.
#[test]
fn sparse_checkpoints_restore_into_another_node_count() {
    let sparse = || {
        let mut cfg = Config::sparse(2);
        cfg.workers_per_node = Some(WORKERS);
        cfg.allocation = Allocation::Dynamic;
        cfg
    };
    // Keys spread over the u64 range, created in an order unrelated to their values.
    let key = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 3;
    let (a, b, c, d) = (
        scratch("sparse-a"),
        scratch("sparse-b"),
        scratch("sparse-c"),
        scratch("sparse-d"),
    );
    let nodes = cluster(2, sparse);
    on_every_worker(&nodes, |node, w| {
        for i in 0..300u64 {
            let k = key(i);
            if i % 7 == u64::from(node.rank() + w.id()) {
                w.localize(&[k]).unwrap().detach();
            }
            w.push(&[k], &[1.0, i as f32]).unwrap().detach();
        }
        w.checkpoint(&a).unwrap();
    });
    shutdown(nodes);
    let taken = read_records(&a);
    let per_key = (2 * 2) as f32;
    assert_eq!(taken.len(), 300);
    for i in 0..300u64 {
        assert_eq!(
            taken[&key(i)],
            vec![per_key, per_key * i as f32],
            "key {}",
            key(i)
        );
    }
    let round = |m: u32, from: &Path, to: &Path| {
        let nodes = cluster(m, || sparse().restore_from(from));
        on_every_worker(&nodes, |_, w| w.checkpoint(to).unwrap());
        shutdown(nodes);
    };
    round(3, &a, &b);
    round(2, &b, &c);
    round(3, &c, &d);
    assert_eq!(read_records(&b), taken);
    assert_eq!(read_records(&c), taken);
    assert_eq!(files(&b), files(&d));
    for dir in [a, b, c, d] {
        fs::remove_dir_all(dir).unwrap();
    }
}
