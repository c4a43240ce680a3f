//! What a restore reads: each node reads every shard's key index but, of the values, only the
//! chunks holding records it keeps (about 1/M of them per node of M under range
//! partitioning), verifies every chunk it reads, and refuses a damaged one naming the shard
//! and the chunk. Restores go into unstarted core nodes of rank r of M (`restore_into`), so
//! the bytes each rank reads are observable; bit-exact N→M round trips over TCP are in
//! `checkpoint.rs`.

use std::fs;
use std::path::{Path, PathBuf};

use roam::checkpoint::{RestoreError, RestoreStats, restore_into};
use roam::{Config, NodeHandle};
use roam_core::node::{Node, NodeConfig};
use roam_core::{NodeId, Partitioning};

const KEYS: u64 = 20_000;
const LEN: u32 = 8;

fn config() -> Config {
    let mut cfg = Config::new(KEYS, LEN);
    cfg.workers_per_node = Some(1);
    cfg
}

/// The value of `key`'s `i`-th float in the checkpoint.
fn value(key: u64, i: usize) -> f32 {
    key as f32 * 10.0 + i as f32
}

/// A one-node checkpoint of every key set to [`value`], in a fresh directory.
fn checkpoint(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roam-reads-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let node = NodeHandle::start(config()).unwrap();
    let worker = node.worker(0).unwrap();
    let keys: Vec<u64> = (0..KEYS).collect();
    let values: Vec<f32> = keys
        .iter()
        .flat_map(|&k| (0..LEN as usize).map(move |i| value(k, i)))
        .collect();
    worker.set(&keys, &values).unwrap().wait().unwrap();
    worker.checkpoint(&dir).unwrap();
    drop(worker);
    node.shutdown().unwrap();
    dir
}

fn rank_node(rank: u32, nodes: u32) -> Node {
    let space = config().key_space().unwrap();
    Node::new(NodeConfig::new(
        NodeId(rank),
        nodes,
        1,
        space,
        Partitioning::Range,
    ))
}

fn shard(dir: &Path) -> PathBuf {
    let mut shards: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    assert_eq!(shards.len(), 1);
    shards.pop().unwrap()
}

#[test]
fn each_rank_reads_the_key_index_and_only_its_share_of_the_values() {
    let dir = checkpoint("share");
    let size = fs::metadata(shard(&dir)).unwrap().len();
    let manifest = roam::checkpoint::manifest_of(&dir).unwrap();
    let chunk = manifest.shards[0].chunk_bytes;
    let values = KEYS * u64::from(LEN) * 4;
    let index = size - values;
    for nodes in 1..=4u32 {
        let mut loaded = 0;
        for rank in 0..nodes {
            let mut node = rank_node(rank, nodes);
            let stats: RestoreStats = restore_into(&mut node, &dir).unwrap();
            let mine: Vec<u64> = node.directory().keys_of(NodeId(rank)).collect();
            assert_eq!(stats.loaded, mine.len() as u64, "rank {rank} of {nodes}");
            let mut record = Vec::new();
            for &key in mine.iter().step_by(97) {
                assert!(node.store().read_record(key, &mut record), "key {key}");
                let expected: Vec<f32> = (0..LEN as usize).map(|i| value(key, i)).collect();
                assert_eq!(record, expected, "key {key} at rank {rank} of {nodes}");
            }
            loaded += stats.loaded;
            // The index twice (once to list the value chunks this rank needs, once to load
            // them), this rank's values, and at most a partial chunk at each end of its range
            // and at each region boundary (read by two cursors).
            let bound = 2 * index + values / u64::from(nodes) + 4 * chunk;
            assert!(
                stats.bytes_read <= bound,
                "rank {rank} of {nodes} read {} bytes of {size}, more than {bound}",
                stats.bytes_read
            );
            if nodes == 1 {
                assert!(stats.bytes_read >= size, "one node reads the whole shard");
            }
        }
        assert_eq!(loaded, KEYS, "{nodes} ranks restore every key once");
    }
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_damaged_chunk_fails_the_rank_that_reads_it_naming_shard_and_chunk() {
    let dir = checkpoint("damaged");
    let path = shard(&dir);
    let mut bytes = fs::read(&path).unwrap();
    let at = bytes.len() - 3; // the last key's values: rank 1 of 2 keeps it
    bytes[at] ^= 0x01;
    fs::write(&path, &bytes).unwrap();
    // Rank 0 reads no byte of the damaged chunk: it loads its own records, all intact; the
    // damage fails the rank that keeps them, and so the restore of the cluster.
    restore_into(&mut rank_node(0, 2), &dir).unwrap();
    for (rank, nodes) in [(1, 2), (0, 1)] {
        let e = restore_into(&mut rank_node(rank, nodes), &dir).unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(&e, RestoreError::Shard { path: p, .. } if *p == path),
            "{text}"
        );
        assert!(
            text.contains("chunk") && text.contains("checksum"),
            "{text}"
        );
    }
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_manifest_without_chunk_checksums_is_refused_naming_the_shard() {
    let dir = checkpoint("no-chunks");
    let path = shard(&dir);
    let manifest_path = dir.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(&manifest_path).unwrap()).unwrap();
    let info = &mut manifest["shards"][0];
    info.as_object_mut().unwrap().remove("chunk_crc32");
    fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let e = restore_into(&mut rank_node(0, 1), &dir).unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(&e, RestoreError::Shard { path: p, .. } if *p == path),
        "{text}"
    );
    assert!(text.contains("chunk checksums"), "{text}");
    fs::remove_dir_all(dir).unwrap();
}
