//! Named tables over TCP (real nodes on loopback, issue #17): three tables of different
//! dimensions, optimizers, initializers and kinds in one node configuration. Three nodes under
//! dynamic allocation push gradients and pushes for their own rows while localizing random
//! rows of every table, so records of several lengths move while they are stepped; every row
//! ends exactly equal to its sequential reference. Then: bad input is refused by name, a
//! checkpoint of two tables written by 2 nodes restores into 3, and a restore with a table
//! changed fails naming it.

mod common;

use common::cluster;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use roam::{
    Allocation, Config, DynamicPolicy, Initializer, Optimizer, TableAccessError, TableSpec,
};

const USERS: u64 = 60;
const BIAS: u64 = 20;
const ITEMS: u64 = 30;
const ROUNDS: usize = 10;

fn user_table() -> TableSpec {
    TableSpec::dense("user", USERS, 4).with_optimizer(Optimizer::adam(0.05))
}

fn item_table(dim: u32) -> TableSpec {
    TableSpec::dynamic("item", dim, DynamicPolicy::default())
        .with_optimizer(Optimizer::adagrad(0.1))
        .with_initializer(Initializer::Normal {
            mean: 0.0,
            std: 0.1,
            seed: 5,
        })
}

fn bias_table() -> TableSpec {
    TableSpec::dense("bias", BIAS, 1).with_initializer(Initializer::Uniform {
        low: -1.0,
        high: 1.0,
        seed: 9,
    })
}

fn config(tables: Vec<TableSpec>) -> Config {
    let mut cfg = Config::tables(tables);
    cfg.allocation = Allocation::Dynamic;
    cfg
}

/// The item ids: arbitrary 56-bit ids.
fn item_id(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 9
}

fn gradient(seed: u64, table: u64, id: u64, round: usize, dim: usize) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (table << 60) ^ (id << 8) ^ round as u64);
    (0..dim).map(|_| rng.random_range(-2.0f32..2.0)).collect()
}

/// A row's visible values after `rounds` gradients from its initial record.
fn reference(spec: &TableSpec, key: u64, seed: u64, t: u64, id: u64, rounds: usize) -> Vec<f32> {
    let dim = spec.dim as usize;
    let opt = spec.optimizer.unwrap();
    let mut record = spec
        .initializer
        .record(key, dim, opt.layout().record_len(dim));
    for round in 0..rounds {
        let (w, state) = record.split_at_mut(dim);
        opt.step(w, state, &gradient(seed, t, id, round, dim));
    }
    record.truncate(dim);
    record
}

#[test]
fn three_tables_over_tcp_with_relocations_end_exact() {
    let seed = 23;
    println!("seed {seed} (replay: this test with that seed)");
    let nodes = cluster(3, || {
        config(vec![user_table(), item_table(3), bias_table()])
    });
    let (user, item, bias) = (user_table(), item_table(3), bias_table());
    std::thread::scope(|scope| {
        for node in &nodes {
            let (user, item, bias) = (&user, &item, &bias);
            scope.spawn(move || {
                let w = node.worker(0).unwrap();
                let (users, items, biases) = (
                    w.table("user").unwrap(),
                    w.table("item").unwrap(),
                    w.table("bias").unwrap(),
                );
                assert_eq!((users.dim(), items.dim(), biases.dim()), (4, 3, 1));
                let rank = u64::from(node.rank());
                let mut rng = ChaCha8Rng::seed_from_u64(seed + rank);
                let my_users: Vec<u64> = (0..USERS).filter(|k| k % 3 == rank).collect();
                let my_items: Vec<u64> =
                    (0..ITEMS).filter(|k| k % 3 == rank).map(item_id).collect();
                let my_bias: Vec<u64> = (0..BIAS).filter(|k| k % 3 == rank).collect();
                for round in 0..ROUNDS {
                    let u: Vec<u64> = (0..6).map(|_| rng.random_range(0..USERS)).collect();
                    let i: Vec<u64> = (0..6)
                        .map(|_| item_id(rng.random_range(0..ITEMS)))
                        .collect();
                    let b: Vec<u64> = (0..3).map(|_| rng.random_range(0..BIAS)).collect();
                    users.localize(&u).unwrap().detach();
                    items.localize(&i).unwrap().detach();
                    biases.localize(&b).unwrap().detach();
                    let g: Vec<f32> = my_users
                        .iter()
                        .flat_map(|&id| gradient(seed, 0, id, round, 4))
                        .collect();
                    users.push_gradients(&my_users, &g).unwrap().wait().unwrap();
                    let g: Vec<f32> = my_items
                        .iter()
                        .flat_map(|&id| gradient(seed, 1, id, round, 3))
                        .collect();
                    items.push_gradients(&my_items, &g).unwrap().wait().unwrap();
                    let ones = vec![1.0; my_bias.len()];
                    biases.push(&my_bias, &ones).unwrap().wait().unwrap();
                }
                w.barrier().unwrap();
                let all: Vec<u64> = (0..USERS).collect();
                let mut out = vec![0.0; all.len() * 4];
                users.pull(&all, &mut out).unwrap().wait().unwrap();
                for (id, got) in out.chunks(4).enumerate() {
                    let key = users.key(id as u64).unwrap();
                    let want = reference(user, key, seed, 0, id as u64, ROUNDS);
                    assert_eq!(got, want, "user {id} on node {rank}");
                }
                // Every item, and one never touched: its initializer's row.
                let mut all: Vec<u64> = (0..ITEMS).map(item_id).collect();
                all.push(item_id(ITEMS + 7));
                let mut out = vec![0.0; all.len() * 3];
                items.pull(&all, &mut out).unwrap().wait().unwrap();
                for (i, (&id, got)) in all.iter().zip(out.chunks(3)).enumerate() {
                    let key = items.key(id).unwrap();
                    let rounds = if i < ITEMS as usize { ROUNDS } else { 0 };
                    let want = reference(item, key, seed, 1, id, rounds);
                    assert_eq!(got, want, "item {id} on node {rank}");
                }
                let all: Vec<u64> = (0..BIAS).collect();
                let mut out = vec![0.0; all.len()];
                biases.pull(&all, &mut out).unwrap().wait().unwrap();
                for (id, got) in out.iter().enumerate() {
                    let mut want = [0.0];
                    bias.initializer
                        .fill(biases.key(id as u64).unwrap(), &mut want);
                    // One push of 1 per round, added in order.
                    let want = (0..ROUNDS).fold(want[0], |v, _| v + 1.0);
                    assert_eq!(*got, want, "bias {id} on node {rank}");
                }
                w.barrier().unwrap();
            });
        }
    });
    let moved: u64 = nodes.iter().map(|n| n.stats().relocations_in).sum();
    assert!(moved > 0, "records moved while they were stepped");
    println!("relocations: {moved}");
    shutdown(nodes);
}

#[test]
fn bad_table_input_is_refused_by_name() {
    let nodes = cluster(1, || config(vec![user_table(), bias_table()]));
    let w = nodes[0].worker(0).unwrap();
    let err = w.table("items").map(|_| ()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no table named \"items\" (tables: user, bias)"
    );
    let users = w.table("user").unwrap();
    let mut out = vec![0.0; 8];
    let err = users.pull(&[3, USERS], &mut out).map(|_| ()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("id {USERS} is out of range for table \"user\" (ids are 0..{USERS})")
    );
    let err = users.pull(&[3, 4], &mut out[..7]).map(|_| ()).unwrap_err();
    assert!(
        matches!(err, TableAccessError::Access { ref table, .. } if table == "user"),
        "{err}"
    );
    let biases = w.table("bias").unwrap();
    let err = biases.push_gradients(&[1], &[1.0]).map(|_| ()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "table \"bias\" has no optimizer; push_gradients needs one"
    );
    // Bad configurations fail the start by name.
    for (tables, text) in [
        (
            vec![user_table(), TableSpec::dense("user", 3, 2)],
            "two tables are named \"user\"",
        ),
        (
            vec![TableSpec::dense("zero", 3, 0)],
            "table \"zero\": dim = 0",
        ),
    ] {
        let mut cfg = config(tables);
        cfg.cluster.num_nodes = Some(1);
        cfg.cluster.rank = Some(0);
        let err = roam::NodeHandle::start(cfg).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains(text), "{err}");
    }
    let mut cfg = config(vec![user_table()]);
    cfg.optimizer = Some(Optimizer::sgd(0.1));
    assert!(
        cfg.key_space()
            .unwrap_err()
            .to_string()
            .contains("optimizer")
    );
    drop(users);
    drop(biases);
    drop(w);
    shutdown(nodes);
}

#[test]
fn two_tables_checkpointed_by_two_nodes_restore_into_three() {
    let seed = 31;
    println!("seed {seed}");
    let dir = std::env::temp_dir().join(format!("roam-tables-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let tables = || vec![user_table(), item_table(3)];
    let nodes = cluster(2, || config(tables()));
    std::thread::scope(|scope| {
        for node in &nodes {
            let dir = &dir;
            scope.spawn(move || {
                let w = node.worker(0).unwrap();
                let rank = u64::from(node.rank());
                let users = w.table("user").unwrap();
                let items = w.table("item").unwrap();
                let my_users: Vec<u64> = (0..USERS).filter(|k| k % 2 == rank).collect();
                let my_items: Vec<u64> =
                    (0..ITEMS).filter(|k| k % 2 == rank).map(item_id).collect();
                for round in 0..ROUNDS {
                    let g: Vec<f32> = my_users
                        .iter()
                        .flat_map(|&id| gradient(seed, 0, id, round, 4))
                        .collect();
                    users.push_gradients(&my_users, &g).unwrap().wait().unwrap();
                    let g: Vec<f32> = my_items
                        .iter()
                        .flat_map(|&id| gradient(seed, 1, id, round, 3))
                        .collect();
                    items.push_gradients(&my_items, &g).unwrap().wait().unwrap();
                }
                w.barrier().unwrap();
                w.checkpoint(dir).unwrap();
            });
        }
    });
    shutdown(nodes);
    let manifest = roam::checkpoint::manifest_of(&dir).unwrap();
    let names: Vec<&str> = manifest.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["user", "item"]);
    // Each shard holds every table as tensors of its own: `<name>.ids` (the ids, no table
    // bits) and `<name>.values` (one record a row: the row and its optimizer state).
    let mut ids_seen: Vec<Vec<u64>> = vec![Vec::new(); 2];
    for shard in &manifest.shards {
        let (header, data) = read_shard(&dir.join(&shard.file));
        assert_eq!(header["__metadata__"]["layout"], "tables", "{header}");
        let mut rows = 0;
        for (t, table) in manifest.tables.iter().enumerate() {
            let record = table.dim * (1 + table.hidden_per_value) + table.hidden_per_key;
            let ids = &header[format!("{}.ids", table.name)];
            let values = &header[format!("{}.values", table.name)];
            let n = ids["shape"][0].as_u64().unwrap();
            assert_eq!(ids["dtype"], "U64");
            assert_eq!(values["dtype"], "F32");
            assert_eq!(values["shape"], serde_json::json!([n, record]), "{header}");
            let at = ids["data_offsets"][0].as_u64().unwrap() as usize;
            ids_seen[t].extend(
                data[at..at + 8 * n as usize]
                    .chunks(8)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap())),
            );
            rows += n;
        }
        assert_eq!(rows, shard.keys, "{}", shard.file);
        assert_eq!(
            header.as_object().unwrap().len(),
            1 + 2 * manifest.tables.len()
        );
    }
    for (t, want) in [
        (0..USERS).collect::<Vec<_>>(),
        (0..ITEMS).map(item_id).collect(),
    ]
    .into_iter()
    .enumerate()
    {
        let (mut got, mut want) = (ids_seen[t].clone(), want);
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "table {t}: every id once, across the shards");
    }

    // Three nodes restore it; one more gradient step everywhere matches the reference's next
    // (so the optimizer state came back too).
    let (user, item) = (user_table(), item_table(3));
    let restored = cluster(3, || config(tables()).restore_from(&dir));
    std::thread::scope(|scope| {
        for node in &restored {
            let (user, item) = (&user, &item);
            scope.spawn(move || {
                let w = node.worker(0).unwrap();
                let rank = u64::from(node.rank());
                let users = w.table("user").unwrap();
                let items = w.table("item").unwrap();
                let my_users: Vec<u64> = (0..USERS).filter(|k| k % 3 == rank).collect();
                let g: Vec<f32> = my_users
                    .iter()
                    .flat_map(|&id| gradient(seed, 0, id, ROUNDS, 4))
                    .collect();
                users.push_gradients(&my_users, &g).unwrap().wait().unwrap();
                let my_items: Vec<u64> =
                    (0..ITEMS).filter(|k| k % 3 == rank).map(item_id).collect();
                let g: Vec<f32> = my_items
                    .iter()
                    .flat_map(|&id| gradient(seed, 1, id, ROUNDS, 3))
                    .collect();
                items.push_gradients(&my_items, &g).unwrap().wait().unwrap();
                w.barrier().unwrap();
                let all: Vec<u64> = (0..USERS).collect();
                let mut out = vec![0.0; all.len() * 4];
                users.pull(&all, &mut out).unwrap().wait().unwrap();
                for (id, got) in out.chunks(4).enumerate() {
                    let key = users.key(id as u64).unwrap();
                    let want = reference(user, key, seed, 0, id as u64, ROUNDS + 1);
                    assert_eq!(got, want, "user {id} on node {rank} after the restore");
                }
                let all: Vec<u64> = (0..ITEMS).map(item_id).collect();
                let mut out = vec![0.0; all.len() * 3];
                items.pull(&all, &mut out).unwrap().wait().unwrap();
                for (&id, got) in all.iter().zip(out.chunks(3)) {
                    let key = items.key(id).unwrap();
                    let want = reference(item, key, seed, 1, id, ROUNDS + 1);
                    assert_eq!(got, want, "item {id} on node {rank} after the restore");
                }
                w.barrier().unwrap();
            });
        }
    });
    shutdown(restored);

    // A table of another dimension is refused by name.
    let text = restore_error(vec![user_table(), item_table(5)], &dir);
    assert!(
        text.contains("table \"item\": the checkpoint's is dim 3"),
        "{text}"
    );

    // A shard whose table tensor does not fit its table (the item records said to be 7
    // floats, not 6: dim 3 and Adagrad's accumulator) is refused naming the table.
    patch_header(
        &dir.join(&manifest.shards[0].file),
        "\"item.values\"",
        ",6]",
        ",7]",
    );
    let text = restore_error(tables(), &dir);
    assert!(
        text.contains("table \"item\": values shape") && text.contains(", 7]"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Why one node of `tables` cannot start from the checkpoint in `dir`.
fn restore_error(tables: Vec<TableSpec>, dir: &std::path::Path) -> String {
    let mut cfg = config(tables).restore_from(dir);
    cfg.cluster.num_nodes = Some(1);
    cfg.cluster.rank = Some(0);
    roam::NodeHandle::start(cfg)
        .map(|_| ())
        .unwrap_err()
        .to_string()
}

/// Replaces the first `from` after `anchor` in a safetensors file's header by `to` (as long:
/// the file keeps its size and offsets).
fn patch_header(path: &std::path::Path, anchor: &str, from: &str, to: &str) {
    assert_eq!(from.len(), to.len());
    let mut bytes = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let head = std::str::from_utf8(&bytes[8..8 + len]).unwrap();
    let at = head.find(anchor).unwrap();
    let at = 8 + at + head[at..].find(from).unwrap();
    bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
    std::fs::write(path, &bytes).unwrap();
}

/// A safetensors file's JSON header and the bytes after it.
fn read_shard(path: &std::path::Path) -> (serde_json::Value, Vec<u8>) {
    let bytes = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    (header, bytes[8 + len..].to_vec())
}

fn shutdown(nodes: Vec<roam::NodeHandle>) {
    std::thread::scope(|scope| {
        for node in nodes {
            scope.spawn(move || node.shutdown().unwrap());
        }
    });
}

/// Checkpoints of named tables written before the `tables` layout held every table under its
/// keys (`table << 56 | id`) in the per-key layout (`keys`, `offsets`, `values`). The shard of
/// a fresh checkpoint is rewritten that way (with its manifest's sizes and checksums), and two
/// nodes restore it: every row is the one trained.
#[test]
fn a_tables_checkpoint_in_the_earlier_per_key_layout_still_restores() {
    let seed = 7;
    println!("seed {seed}");
    let dir = std::env::temp_dir().join(format!("roam-tables-per-key-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let tables = || vec![user_table(), item_table(3)];
    let trained_users: Vec<u64> = (0..USERS).step_by(3).collect();
    let all_items: Vec<u64> = (0..ITEMS).map(item_id).collect();
    let nodes = cluster(1, || config(tables()));
    {
        let w = nodes[0].worker(0).unwrap();
        let (users, items) = (w.table("user").unwrap(), w.table("item").unwrap());
        let g: Vec<f32> = (trained_users.iter())
            .flat_map(|&id| gradient(seed, 0, id, 0, 4))
            .collect();
        users
            .push_gradients(&trained_users, &g)
            .unwrap()
            .wait()
            .unwrap();
        let g: Vec<f32> = (all_items.iter())
            .flat_map(|&id| gradient(seed, 1, id, 0, 3))
            .collect();
        items
            .push_gradients(&all_items, &g)
            .unwrap()
            .wait()
            .unwrap();
        w.checkpoint(&dir).unwrap();
    }
    shutdown(nodes);

    let mut manifest = roam::checkpoint::manifest_of(&dir).unwrap();
    let path = dir.join(&manifest.shards[0].file);
    let (header, data) = read_shard(&path);
    let (mut keys, mut offsets, mut values) = (Vec::new(), vec![0u64], Vec::new());
    for (t, table) in manifest.tables.iter().enumerate() {
        let tensor = |suffix: &str| {
            let info = &header[format!("{}.{suffix}", table.name)];
            let at = |i: usize| info["data_offsets"][i].as_u64().unwrap() as usize;
            (info["shape"].clone(), &data[at(0)..at(1)])
        };
        let (shape, ids) = tensor("ids");
        assert_eq!(shape[0].as_u64().unwrap() as usize, ids.len() / 8);
        let (shape, records) = tensor("values");
        let record = shape[1].as_u64().unwrap();
        for id in ids.chunks(8) {
            keys.push((t as u64) << 56 | u64::from_le_bytes(id.try_into().unwrap()));
            offsets.push(offsets.last().unwrap() + record);
        }
        values.extend_from_slice(records);
    }
    let (n, total) = (keys.len() as u64, values.len() as u64 / 4);
    let (keys_end, offsets_end) = (8 * n, 8 * n + 8 * (n + 1));
    let mut json = serde_json::json!({
        "__metadata__": {"format": "roam-checkpoint", "version": "1", "layout": "per-key"},
        "keys": {"dtype": "U64", "shape": [n], "data_offsets": [0, keys_end]},
        "offsets": {"dtype": "U64", "shape": [n + 1], "data_offsets": [keys_end, offsets_end]},
        "values": {"dtype": "F32", "shape": [total],
                   "data_offsets": [offsets_end, offsets_end + 4 * total]},
    })
    .to_string();
    while !json.len().is_multiple_of(8) {
        json.push(' ');
    }
    let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(json.as_bytes());
    keys.iter()
        .for_each(|k| bytes.extend_from_slice(&k.to_le_bytes()));
    offsets
        .iter()
        .for_each(|o| bytes.extend_from_slice(&o.to_le_bytes()));
    bytes.extend_from_slice(&values);
    std::fs::write(&path, &bytes).unwrap();
    let size = bytes.len() as u64;
    let shard = &mut manifest.shards[0];
    shard.bytes = size;
    shard.crc32 = crc32fast::hash(&bytes);
    shard.chunk_bytes = size.div_ceil(64).next_power_of_two().clamp(256, 4 << 20);
    shard.chunk_crc32 = (bytes.chunks(shard.chunk_bytes as usize))
        .map(crc32fast::hash)
        .collect();
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec_pretty(&manifest).unwrap(),
    )
    .unwrap();

    let (user, item) = (user_table(), item_table(3));
    let restored = cluster(2, || config(tables()).restore_from(&dir));
    let w = restored[0].worker(0).unwrap();
    let (users, items) = (w.table("user").unwrap(), w.table("item").unwrap());
    let all_users: Vec<u64> = (0..USERS).collect();
    let mut out = vec![0.0; all_users.len() * 4];
    users.pull(&all_users, &mut out).unwrap().wait().unwrap();
    for (id, got) in out.chunks(4).enumerate() {
        let rounds = usize::from(trained_users.contains(&(id as u64)));
        let key = users.key(id as u64).unwrap();
        let want = reference(&user, key, seed, 0, id as u64, rounds);
        assert_eq!(got, want, "user {id}");
    }
    let mut out = vec![0.0; all_items.len() * 3];
    items.pull(&all_items, &mut out).unwrap().wait().unwrap();
    for (&id, got) in all_items.iter().zip(out.chunks(3)) {
        let want = reference(&item, items.key(id).unwrap(), seed, 1, id, 1);
        assert_eq!(got, want, "item {id}");
    }
    drop(users);
    drop(items);
    drop(w);
    shutdown(restored);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A table without a row in the checkpoint has tensors of no rows, and the restore takes the
/// others' rows as they were; a shard of a layout this roam does not know is refused naming
/// it.
#[test]
fn a_table_without_rows_restores_and_an_unknown_layout_is_refused() {
    let seed = 11;
    println!("seed {seed}");
    let dir = std::env::temp_dir().join(format!("roam-tables-empty-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let tables = || vec![item_table(3), user_table()];
    let users: Vec<u64> = (0..USERS).collect();
    let nodes = cluster(1, || config(tables()));
    {
        let w = nodes[0].worker(0).unwrap();
        let table = w.table("user").unwrap();
        let g: Vec<f32> = (users.iter())
            .flat_map(|&id| gradient(seed, 0, id, 0, 4))
            .collect();
        table.push_gradients(&users, &g).unwrap().wait().unwrap();
        w.checkpoint(&dir).unwrap();
    }
    shutdown(nodes);
    let manifest = roam::checkpoint::manifest_of(&dir).unwrap();
    let path = dir.join(&manifest.shards[0].file);
    let (header, _) = read_shard(&path);
    assert_eq!(header["item.ids"]["shape"], serde_json::json!([0]));
    assert_eq!(header["item.values"]["shape"], serde_json::json!([0, 6]));

    let user = user_table();
    let restored = cluster(1, || config(tables()).restore_from(&dir));
    {
        let w = restored[0].worker(0).unwrap();
        let table = w.table("user").unwrap();
        let mut out = vec![0.0; users.len() * 4];
        table.pull(&users, &mut out).unwrap().wait().unwrap();
        for (&id, got) in users.iter().zip(out.chunks(4)) {
            let want = reference(&user, table.key(id).unwrap(), seed, 0, id, 1);
            assert_eq!(got, want, "user {id}");
        }
    }
    shutdown(restored);

    patch_header(&path, "\"layout\"", "\"tables\"", "\"tablez\"");
    let text = restore_error(tables(), &dir);
    assert!(
        text.contains("layout \"tablez\" is not one this roam reads"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
