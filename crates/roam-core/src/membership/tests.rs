//! Tests of the membership records: the fingerprint covers the row rules.

use super::*;
use crate::directory::Partitioning;
use crate::dynamic::{Admission, DynamicPolicy};
use crate::init::Initializer;
use crate::keyspace::KeySpace;
use crate::optim::Optimizer;

fn config(space: KeySpace) -> NodeConfig {
    NodeConfig::new(NodeId(0), 2, 1, space, Partitioning::Hash)
}

/// A joiner must create, step and evict rows as the members do: two configurations that
/// differ only in the initializer, the optimizer's parameters or the admission/eviction
/// policy have different fingerprints, and equal ones the same.
#[test]
fn the_fingerprint_covers_the_row_rules() {
    let sparse = || KeySpace::sparse(4).unwrap();
    let policy = |max_rows| DynamicPolicy {
        admission: Admission::default(),
        max_rows,
        max_bytes: None,
        ttl_ns: None,
        ttl_steps: None,
        spill: false,
    };
    let variants = [
        sparse(),
        sparse()
            .with_initializer(Initializer::Uniform {
                low: -0.1,
                high: 0.1,
                seed: 1,
            })
            .unwrap(),
        sparse()
            .with_initializer(Initializer::Uniform {
                low: -0.1,
                high: 0.1,
                seed: 2,
            })
            .unwrap(),
        sparse().with_optimizer(Optimizer::adagrad(0.1)).unwrap(),
        sparse().with_optimizer(Optimizer::adagrad(0.2)).unwrap(),
        sparse().with_dynamic(policy(Some(10))).unwrap(),
        sparse().with_dynamic(policy(Some(11))).unwrap(),
    ];
    let prints: Vec<u64> = variants
        .iter()
        .map(|space| fingerprint(&config(space.clone())))
        .collect();
    for (i, a) in prints.iter().enumerate() {
        for (j, b) in prints.iter().enumerate().skip(i + 1) {
            assert_ne!(a, b, "variants {i} and {j} share a fingerprint");
        }
    }
    let again = sparse().with_dynamic(policy(Some(10))).unwrap();
    assert_eq!(fingerprint(&config(again)), prints[5]);
}
