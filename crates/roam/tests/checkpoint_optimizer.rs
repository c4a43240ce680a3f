//! The manifest records the server-side optimizer (kind and hyper-parameters) beside the row
//! layout, and a restore refuses a checkpoint of another optimizer kind or row layout, naming
//! both; a manifest of an earlier roam (no optimizer recorded) still restores where the layout
//! matches.

use std::fs;
use std::path::PathBuf;

use roam::checkpoint::{RestoreError, manifest_of};
use roam::{Config, NodeHandle, Optimizer, StartError};

const KEYS: u64 = 50;
const LEN: u32 = 4;

fn config(optimizer: Option<Optimizer>) -> Config {
    let mut cfg = Config::new(KEYS, LEN);
    cfg.workers_per_node = Some(1);
    cfg.optimizer = optimizer;
    cfg
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roam-ckpt-optim-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every key's visible values after `steps` Adam steps (lr 0.1) of a fixed gradient,
/// checkpointed into `dir`.
fn adam_checkpoint(dir: &std::path::Path) -> Vec<f32> {
    let node = NodeHandle::start(config(Some(Optimizer::adam(0.1)))).unwrap();
    let worker = node.worker(0).unwrap();
    let keys: Vec<u64> = (0..KEYS).collect();
    let grads: Vec<f32> = (0..KEYS * u64::from(LEN))
        .map(|i| i as f32 * 0.01)
        .collect();
    for _ in 0..3 {
        worker
            .push_gradients(&keys, &grads)
            .unwrap()
            .wait()
            .unwrap();
    }
    let mut values = vec![0f32; grads.len()];
    worker.pull(&keys, &mut values).unwrap().wait().unwrap();
    worker.checkpoint(dir).unwrap();
    drop(worker);
    node.shutdown().unwrap();
    values
}

fn restore(dir: &std::path::Path, optimizer: Option<Optimizer>) -> Result<Vec<f32>, StartError> {
    let node = NodeHandle::start(config(optimizer).restore_from(dir))?;
    let worker = node.worker(0).unwrap();
    let keys: Vec<u64> = (0..KEYS).collect();
    let mut values = vec![0f32; keys.len() * LEN as usize];
    worker.pull(&keys, &mut values).unwrap().wait().unwrap();
    drop(worker);
    node.shutdown().unwrap();
    Ok(values)
}

fn refusal(result: Result<Vec<f32>, StartError>) -> (RestoreError, String) {
    match result {
        Err(StartError::Restore(e)) => {
            let text = e.to_string();
            (e, text)
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("restored"),
    }
}

#[test]
fn the_manifest_records_the_optimizer_and_a_restore_checks_its_kind() {
    let dir = scratch("kind");
    let values = adam_checkpoint(&dir);
    let manifest = manifest_of(&dir).unwrap();
    let recorded = manifest.optimizer.as_ref().expect("optimizer recorded");
    assert_eq!(recorded.kind, "adam");
    assert_eq!(recorded.params["lr"].as_f64(), Some(0.1));
    assert_eq!(recorded.params["beta1"].as_f64(), Some(0.9));
    assert_eq!(
        (
            manifest.key_space.value_len,
            manifest.key_space.hidden_per_value,
            manifest.key_space.hidden_per_key
        ),
        (Some(LEN), 2, 1),
        "Adam's row: the values, m and v per value, the step count per key"
    );

    // The same kind with other hyper-parameters restores (a resume may change the rate).
    assert_eq!(restore(&dir, Some(Optimizer::adam(0.01))).unwrap(), values);

    // Another kind, or none, is refused naming both.
    for (other, name) in [(Some(Optimizer::adagrad(0.1)), "adagrad"), (None, "none")] {
        let (e, text) = refusal(restore(&dir, other));
        assert!(matches!(e, RestoreError::Optimizer { .. }), "{text}");
        assert!(
            text.contains("manifest.json")
                && text.contains("optimizer adam (")
                && text.contains(&format!("this node's is {name}")),
            "{text}"
        );
    }
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_manifest_without_the_optimizer_restores_where_the_layout_decides() {
    let dir = scratch("old");
    let values = adam_checkpoint(&dir);
    // A manifest of an earlier roam: no `optimizer` field.
    let path = dir.join("manifest.json");
    let mut json: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    json.as_object_mut().unwrap().remove("optimizer");
    fs::write(&path, serde_json::to_vec_pretty(&json).unwrap()).unwrap();
    assert_eq!(manifest_of(&dir).unwrap().optimizer, None);

    // Adam's layout matches: restored.
    assert_eq!(restore(&dir, Some(Optimizer::adam(0.1))).unwrap(), values);
    // Adagrad's does not: refused, naming both layouts and optimizers.
    let (e, text) = refusal(restore(&dir, Some(Optimizer::adagrad(0.1))));
    assert!(matches!(e, RestoreError::Layout { .. }), "{text}");
    assert!(
        text.contains("2 hidden per value and 1 hidden per key (optimizer unrecorded)")
            && text.contains("1 hidden per value and 0 hidden per key (optimizer adagrad"),
        "{text}"
    );
    fs::remove_dir_all(&dir).unwrap();
}

/// A row layout set by hand (no optimizer) is checked the same way.
#[test]
fn another_hand_set_row_layout_is_refused_naming_both() {
    let dir = scratch("layout");
    let mut cfg = config(None);
    cfg.record_layout = roam::RecordLayout {
        hidden_per_value: 1,
        hidden_per_key: 1,
    };
    let node = NodeHandle::start(cfg).unwrap();
    let worker = node.worker(0).unwrap();
    worker.checkpoint(&dir).unwrap();
    drop(worker);
    node.shutdown().unwrap();
    let (e, text) = refusal(restore(&dir, None));
    assert!(matches!(e, RestoreError::Layout { .. }), "{text}");
    assert!(
        text.contains(
            "rows of 4 visible values, then 1 hidden per value and 1 hidden per key \
                       (optimizer none)"
        ) && text.contains("are 4 visible values, then 0 hidden per value and 0 hidden per key"),
        "{text}"
    );
    fs::remove_dir_all(&dir).unwrap();
}
