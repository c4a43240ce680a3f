//! Tests of the access front end: bad batches refused whole, local keys served without the
//! node, misses in batch order, gradients and their aggregates.

use std::sync::atomic::Ordering;

use super::*;
use crate::directory::Partitioning;
use crate::id::NodeId;
use crate::keyspace::KeySpace;
use crate::node::NodeConfig;
use crate::policy::PolicyKind;

/// Node 0 of two, range-partitioned: keys `0..half` are local, the rest remote.
fn node(space: KeySpace, fast: bool, policy: PolicyKind) -> Node {
    let mut cfg = NodeConfig::new(NodeId(0), 2, 1, space, Partitioning::Range);
    cfg.fast_local_access = fast;
    cfg.policy = policy;
    Node::new(cfg)
}

fn local_and_remote(node: &Node) -> (Key, Key) {
    let space = node.config().space.num_keys();
    let local = (0..space).find(|&k| node.store().residency(k) == Residency::Local);
    let remote = (0..space).find(|&k| node.store().residency(k) == Residency::Remote);
    (local.unwrap(), remote.unwrap())
}

fn load(counter: &std::sync::atomic::AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

fn snapshot(node: &Node, keys: &[Key]) -> Vec<f32> {
    let space = &node.config().space;
    let mut all = Vec::new();
    for &key in keys {
        let mut vals = vec![f32::NAN; space.len(key)];
        node.store().pull_local(key, &mut vals);
        all.extend(vals);
    }
    all
}

#[test]
fn bad_batches_are_refused_with_nothing_changed() {
    for space in [
        KeySpace::uniform(64, 2).unwrap(),
        KeySpace::per_key((0..64).map(|k| 1 + k % 3).collect()).unwrap(),
    ] {
        let node = node(space.clone(), true, PolicyKind::Static);
        let mut front = Front::new(&node, WorkerId(0), Arc::default());
        let (a, b) = (1, 2);
        let len = space.len(a) + space.len(b);
        let before = snapshot(&node, &[a, b]);

        let vals = vec![1.0; len + 2];
        let refused = front.push(&[a, b, 64], &vals, UpdateMode::Add);
        assert_eq!(
            refused.unwrap_err(),
            AccessError::KeyOutOfRange {
                key: 64,
                num_keys: 64
            }
        );
        let vals = vec![1.0; len + 1];
        let refused = front.push(&[a, b], &vals, UpdateMode::Set);
        assert_eq!(
            refused.unwrap_err(),
            AccessError::LengthMismatch {
                keys: 2,
                expected: len,
                actual: len + 1
            }
        );
        let mut out = vec![0.0; len + 1];
        let refused = front.pull(&[a, b], &mut out);
        assert!(matches!(
            refused,
            Err(AccessError::LengthMismatch { keys: 2, .. })
        ));
        let mut out = vec![0.0; len + space.uniform_len().unwrap_or(0)];
        let refused = front.pull(&[a, b, 70], &mut out).unwrap_err();
        assert_eq!(
            refused,
            AccessError::KeyOutOfRange {
                key: 70,
                num_keys: 64
            }
        );
        assert!(front.localize(&[a, 99]).is_err());
        assert!(front.pull_if_local(a, &mut [0.0; 9]).is_err());

        assert_eq!(
            snapshot(&node, &[a, b]),
            before,
            "a refused batch changed values"
        );
        assert_eq!(load(&front.counters().local_push_keys), 0);
        assert_eq!(load(&front.counters().local_pull_keys), 0);
    }
}

#[test]
fn gradients_need_an_optimizer_and_step_local_keys_without_the_node() {
    let space = KeySpace::uniform(64, 2).unwrap();
    let plain = node(space.clone(), true, PolicyKind::Static);
    let mut front = Front::new(&plain, WorkerId(0), Arc::default());
    assert_eq!(
        front.push_gradients(&[1], &[1.0, 1.0]).unwrap_err(),
        AccessError::NoOptimizer
    );
    let space = space
        .with_optimizer(crate::optim::Optimizer::sgd(0.5))
        .unwrap();
    let mut node = node(space, true, PolicyKind::Static);
    let (local, remote) = local_and_remote(&node);
    let mut front = Front::new(&node, WorkerId(0), Arc::default());
    let refused = front.push_gradients(&[local, 64], &[1.0; 4]);
    assert!(matches!(
        refused,
        Err(AccessError::KeyOutOfRange { key: 64, .. })
    ));
    let handoff = front
        .push_gradients(&[local, remote], &[2.0, 4.0, 1.0, 1.0])
        .unwrap()
        .expect("the remote key is handed off");
    assert!(matches!(
        handoff,
        Handoff::Push {
            mode: UpdateMode::Gradient,
            ..
        }
    ));
    handoff.issue(&mut node, Time(1), WorkerId(0));
    assert_eq!(snapshot(&node, &[local]), [-1.0, -2.0]);
}

/// Aggregates are twice the keys' lengths (a mismatch names the doubled length), need an
/// optimizer, step local keys now with `Optimizer::step_sums` and hand the rest off as
/// aggregates.
#[test]
fn gradient_aggregates_are_checked_and_step_local_keys() {
    let space = KeySpace::per_key(vec![2; 64]).unwrap();
    let plain = node(space.clone(), true, PolicyKind::Static);
    let mut front = Front::new(&plain, WorkerId(0), Arc::default());
    assert_eq!(
        front.push_gradient_sums(&[1], &[1.0; 4]).unwrap_err(),
        AccessError::NoOptimizer
    );
    let adagrad = crate::optim::Optimizer::adagrad(0.5);
    for space in [
        KeySpace::uniform(64, 2).unwrap(),
        KeySpace::per_key(vec![2; 64]).unwrap(),
    ] {
        let mut node = node(
            space.with_optimizer(adagrad).unwrap(),
            true,
            PolicyKind::Static,
        );
        let (local, remote) = local_and_remote(&node);
        let mut front = Front::new(&node, WorkerId(0), Arc::default());
        for (len, expected) in [(4, 8), (7, 8), (9, 8)] {
            assert_eq!(
                front
                    .push_gradient_sums(&[local, remote], &vec![1.0; len])
                    .unwrap_err(),
                AccessError::LengthMismatch {
                    keys: 2,
                    expected,
                    actual: len
                },
                "{len} values"
            );
        }
        assert!(matches!(
            front.push_gradient_sums(&[local, 64], &[1.0; 8]),
            Err(AccessError::KeyOutOfRange { key: 64, .. })
        ));
        for bad in [-0.5, f32::NAN, f32::INFINITY] {
            let aggregate = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, bad];
            assert_eq!(
                front
                    .push_gradient_sums(&[local, remote], &aggregate)
                    .unwrap_err(),
                AccessError::BadSquares { key: remote },
                "square {bad}"
            );
        }
        assert_eq!(
            snapshot(&node, &[local]),
            [0.0, 0.0],
            "refused batches change nothing"
        );
        let aggregate = [3.0, -1.0, 5.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        let handoff = front
            .push_gradient_sums(&[local, remote], &aggregate)
            .unwrap()
            .expect("the remote key is handed off");
        let Handoff::Push {
            keys,
            offsets,
            mode,
            ..
        } = &handoff
        else {
            panic!("a push hand-off");
        };
        assert_eq!(
            (*keys, *offsets, *mode),
            (&[remote][..], &[4][..], UpdateMode::GradientSums)
        );
        handoff.issue(&mut node, Time(1), WorkerId(0));
        let (mut w, mut acc) = ([0.0f32; 2], [0.0f32; 2]);
        adagrad.step_sums(&mut w, &mut acc, &[3.0, -1.0], &[5.0, 1.0]);
        assert_eq!(snapshot(&node, &[local]), w);
    }
}

#[test]
fn local_keys_are_served_without_the_node() {
    let mut node = node(KeySpace::uniform(64, 2).unwrap(), true, PolicyKind::Static);
    let (local, _) = local_and_remote(&node);
    let mut front = Front::new(&node, WorkerId(0), Arc::default());
    let none = front.push(&[local], &[1.5, 2.5], UpdateMode::Add).unwrap();
    assert!(none.is_none(), "an all-local push needs no hand-off");
    let none = front
        .push(&[local, local], &[1.0, 1.0, 0.5, 0.5], UpdateMode::Add)
        .unwrap();
    assert!(none.is_none());
    let mut out = [0.0; 2];
    assert!(front.pull(&[local], &mut out).unwrap().is_none());
    assert_eq!(
        out,
        [3.0, 4.0],
        "both updates of a key named twice are applied"
    );
    assert!(front.pull_if_local(local, &mut out).unwrap());
    assert!(front.localize(&[local]).unwrap().is_none());

    assert_eq!(node.pending_ops(), 0);
    assert!(node.poll_transmit().is_none(), "the node was not involved");
    let c = front.counters();
    assert_eq!(load(&c.local_push_keys), 3);
    assert_eq!(load(&c.local_push_ops), 2);
    assert_eq!(load(&c.local_pull_keys), 2);
    assert_eq!(load(&c.local_pull_ops), 2);
}

#[test]
fn misses_are_collected_in_batch_order_with_their_offsets() {
    for fast in [true, false] {
        let space = KeySpace::per_key((0..64).map(|k| 1 + k % 3).collect()).unwrap();
        let mut node = node(space.clone(), fast, PolicyKind::Static);
        let (local, remote) = local_and_remote(&node);
        let other = remote + 1;
        let keys = [remote, local, other, remote];
        let lens: Vec<usize> = keys.iter().map(|&k| space.len(k)).collect();
        let at = |i: usize| lens[..i].iter().sum::<usize>();
        let mut front = Front::new(&node, WorkerId(0), Arc::default());
        node.store()
            .push_local(local, &vec![7.0; space.len(local)], UpdateMode::Set);

        let mut out = vec![-1.0; lens.iter().sum()];
        let handoff = front.pull(&keys, &mut out).unwrap().expect("remote keys");
        let (want_keys, want_offsets): (Vec<Key>, Vec<usize>) = if fast {
            (vec![remote, other, remote], vec![0, at(2), at(3)])
        } else {
            (keys.to_vec(), (0..4).map(at).collect())
        };
        match &handoff {
            Handoff::Pull { keys, offsets } => {
                assert_eq!(*keys, &want_keys[..], "duplicates stay two reads");
                assert_eq!(*offsets, &want_offsets[..]);
            }
            other => panic!("not a pull: {other:?}"),
        }
        let local_vals = &out[at(1)..at(2)];
        if fast {
            assert!(local_vals.iter().all(|&v| v == 7.0), "{local_vals:?}");
        }
        let req = handoff.issue(&mut node, Time(1), WorkerId(0));
        assert_eq!(node.pending_ops(), 1, "one request {req:?} for all misses");

        let vals: Vec<f32> = (0..out.len()).map(|i| i as f32).collect();
        match front.push(&keys, &vals, UpdateMode::Add).unwrap() {
            Some(Handoff::Push {
                keys: k,
                offsets,
                vals: v,
                mode,
            }) => {
                assert_eq!(k, &want_keys[..]);
                assert_eq!(offsets, &want_offsets[..]);
                assert_eq!(v.len(), vals.len());
                assert_eq!(mode, UpdateMode::Add);
            }
            other => panic!("not a push: {other:?}"),
        }
    }
}

#[test]
fn localize_hands_off_only_the_keys_not_here_when_keys_can_move() {
    let space = KeySpace::uniform(64, 1).unwrap();
    let fixed = node(space.clone(), true, PolicyKind::Static);
    let (local, remote) = local_and_remote(&fixed);
    let mut front = Front::new(&fixed, WorkerId(0), Arc::default());
    assert!(front.localize(&[local, remote]).unwrap().is_none());

    let lapse = PolicyKind::Lapse {
        location_caches: false,
    };
    let moving = node(space, true, lapse);
    let mut front = Front::new(&moving, WorkerId(0), Arc::default());
    assert!(front.localize(&[local]).unwrap().is_none());
    let handoff = front
        .localize(&[local, remote, local, remote])
        .unwrap()
        .expect("remote keys");
    assert_eq!(
        handoff.keys(),
        &[remote, remote],
        "only keys not here, in order"
    );
    assert!(matches!(
        front.localize(&[64]),
        Err(AccessError::KeyOutOfRange { key: 64, .. })
    ));
}
