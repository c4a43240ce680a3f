//! Garbage from peers: requests with keys out of range or the wrong number of values are
//! rejected whole (the requester's op fails with `Rejected`, no parameter changes), malformed
//! replies fail the op, replies nobody asked for are counted as anomalies, and bytes that do not
//! decode break the connection. Frames are altered in flight with `Sim::set_tamper` or forged
//! with `Sim::inject`, so they cross the real codec like any other.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;

use roam_core::wire::{self, FLAG_POSITIONS, FLAG_SET, FLAG_SQUARES, Frame, Kind, Limits};
use roam_core::{KeySpace, NodeId, OpError, Optimizer, ReqId};
use roam_sim::{Fault, Op, Outcome, Sim, SimConfig, WorkerRef, for_each_seed};

/// 3 nodes, 1 worker each, 12 keys of 2 values, range partitioning: node 0 is home of keys
/// 0..4, node 1 of 4..8, node 2 of 8..12.
fn cluster(seed: u64) -> Sim {
    Sim::new(SimConfig::new(3, 1, KeySpace::uniform(12, 2).unwrap()).with_seed(seed))
}

const W1: WorkerRef = WorkerRef {
    node: NodeId(1),
    worker: roam_core::WorkerId(0),
};

fn decode(bytes: &[u8]) -> Frame {
    wire::decode(bytes, &Limits::default()).unwrap().0
}

/// A copy of `frame` with other keys and values (header fields otherwise kept; positions kept
/// where the original has them, else numbered in order).
fn rebuild(frame: &Frame, keys: &[u64], values: &[f32]) -> Vec<u8> {
    let h = frame.header;
    let mut out = if h.flags & FLAG_POSITIONS != 0 {
        let positions: Vec<u32> = (0..keys.len())
            .map(|i| frame.positions().get(i).copied().unwrap_or(i as u32))
            .collect();
        Frame::with_positions(
            h.kind,
            h.origin,
            h.req,
            h.aux,
            keys,
            &positions,
            values.len(),
        )
    } else {
        Frame::new(h.kind, h.origin, h.req, h.aux, keys, values.len())
    };
    out.header.flags = h.flags;
    out.values_mut().copy_from_slice(values);
    out.to_bytes()
}

/// Applies `edit` to the first frame of `kind` on link `from -> to`, leaving all others intact.
fn tamper_first(
    sim: &mut Sim,
    from: u32,
    to: u32,
    kind: Kind,
    mut edit: impl FnMut(&mut Vec<u8>) + 'static,
) {
    let mut done = false;
    sim.set_tamper(move |f, t, bytes| {
        if !done && (f.0, t.0) == (from, to) && bytes[0] == kind as u8 {
            done = true;
            edit(bytes);
        }
    });
}

fn anomalies(sim: &Sim, node: u32) -> u64 {
    sim.node(NodeId(node)).counters().anomalies.load(Relaxed)
}

fn assert_all_zero(sim: &Sim) {
    for key in 0..12 {
        assert_eq!(sim.peek(key), Some(vec![0.0, 0.0]), "key {key} changed");
    }
}

fn rejected_by_node_0(op: &Outcome, reason_part: &str) {
    match op {
        Outcome::Failed(OpError::Rejected { peer, reason }) => {
            assert_eq!(*peer, NodeId(0));
            assert!(
                reason.contains(reason_part),
                "reason {reason:?} lacks {reason_part:?}"
            );
        }
        other => panic!("expected a rejection by node 0, got {other:?}"),
    }
}

#[test]
fn a_write_with_a_key_out_of_range_is_rejected_whole() {
    for_each_seed(4, |seed| {
        for set in [false, true] {
            let mut sim = cluster(seed);
            // The *last* key is made invalid: a server validating as it goes would already have
            // applied the first three.
            tamper_first(&mut sim, 1, 0, Kind::Push, move |bytes| {
                let frame = decode(bytes);
                assert_eq!(frame.header.flags & FLAG_SET != 0, set);
                let mut keys = frame.keys().to_vec();
                *keys.last_mut().unwrap() = 999;
                *bytes = rebuild(&frame, &keys, frame.values());
            });
            let write = |keys: Vec<u64>, vals: Vec<f32>| {
                if set {
                    Op::set(keys, vals)
                } else {
                    Op::push(keys, vals)
                }
            };
            sim.add_script(W1, [write(vec![0, 1, 2, 3], vec![1.0; 8])]);
            sim.run_until_idle().unwrap();
            rejected_by_node_0(&sim.history().ops()[0].outcome, "key 999 is out of range");
            assert_all_zero(&sim);
            assert_eq!(sim.node(NodeId(0)).counters().served_keys.load(Relaxed), 0);

            // The same write, untouched, goes through: the rejection was about the frame only.
            sim.add_script(
                W1,
                [write(vec![0, 1, 2, 3], vec![1.0; 8]), Op::pull(vec![3, 0])],
            );
            sim.run_until_idle().unwrap();
            assert_eq!(
                sim.history().ops()[2].outcome,
                Outcome::Pulled(vec![1.0; 4])
            );
            assert_eq!(anomalies(&sim, 0) + anomalies(&sim, 1), 0);
        }
    });
}

#[test]
fn a_write_with_the_wrong_number_of_values_is_rejected_whole() {
    for_each_seed(4, |seed| {
        for delta in [-1i64, 1, 2] {
            let mut sim = cluster(seed);
            tamper_first(&mut sim, 1, 0, Kind::Push, move |bytes| {
                let frame = decode(bytes);
                let mut values = frame.values().to_vec();
                values.resize((values.len() as i64 + delta) as usize, 5.0);
                *bytes = rebuild(&frame, frame.keys(), &values);
            });
            sim.add_script(W1, [Op::push(vec![2, 0], vec![1.0; 4])]);
            sim.run_until_idle().unwrap();
            rejected_by_node_0(
                &sim.history().ops()[0].outcome,
                "value lengths do not match",
            );
            assert_all_zero(&sim);
        }
    });
}

/// An aggregate of gradients is twice its keys' lengths: a frame that drops the squares, or
/// claims aggregates (`FLAG_SQUARES`) for plain gradients, is rejected whole rather than
/// stepped with values of the wrong meaning.
#[test]
fn gradient_aggregates_of_the_wrong_length_are_rejected_whole() {
    for_each_seed(4, |seed| {
        for aggregates in [true, false] {
            let space = KeySpace::uniform(12, 2)
                .unwrap()
                .with_optimizer(Optimizer::adagrad(0.1))
                .unwrap();
            let mut sim = Sim::new(SimConfig::new(3, 1, space).with_seed(seed));
            tamper_first(&mut sim, 1, 0, Kind::Push, move |bytes| {
                let frame = decode(bytes);
                let mut values = frame.values().to_vec();
                if aggregates {
                    values.truncate(values.len() / 2);
                }
                let mut tampered = decode(&rebuild(&frame, frame.keys(), &values));
                if !aggregates {
                    tampered.header.flags |= FLAG_SQUARES;
                }
                *bytes = tampered.to_bytes();
            });
            let op = if aggregates {
                Op::PushGradientSums {
                    keys: vec![2, 0],
                    aggregates: vec![1.0; 8],
                    wait: true,
                }
            } else {
                Op::PushGradients {
                    keys: vec![2, 0],
                    grads: vec![1.0; 4],
                    wait: true,
                }
            };
            sim.add_script(W1, [op]);
            sim.run_until_idle().unwrap();
            rejected_by_node_0(
                &sim.history().ops()[0].outcome,
                "value lengths do not match",
            );
            assert_all_zero(&sim);
        }
    });
}

#[test]
fn a_malformed_pull_reply_fails_the_pull() {
    for_each_seed(4, |seed| {
        type Edit = fn(&Frame) -> Vec<u8>;
        let edits: [Edit; 3] = [
            |f| rebuild(f, &[f.keys()[1], f.keys()[0]], f.values()),
            |f| rebuild(f, f.keys(), &f.values()[1..]),
            // A third key at a position the pull does not have. (A reply naming fewer keys is
            // a partial answer under the positions protocol, not a malformed one.)
            |f| {
                let keys = [f.keys()[0], f.keys()[1], f.keys()[0]];
                rebuild(f, &keys, &[f.values(), &f.values()[..2]].concat())
            },
        ];
        for edit in edits {
            let mut sim = cluster(seed);
            sim.add_script(
                WorkerRef::new(0, 0),
                [Op::set(vec![0, 1], vec![1.0, 2.0, 3.0, 4.0]), Op::Barrier],
            );
            sim.add_script(W1, [Op::Barrier, Op::pull(vec![0, 1])]);
            sim.add_script(WorkerRef::new(2, 0), [Op::Barrier]);
            tamper_first(&mut sim, 0, 1, Kind::PullReply, move |bytes| {
                *bytes = edit(&decode(bytes))
            });
            sim.run_until_idle().unwrap();
            let pull = sim.history().of_worker(W1).last().unwrap();
            rejected_by_node_0(&pull.outcome, "malformed or duplicate pull answer");
            assert!(sim.unfinished_workers().is_empty());
        }
    });
}

#[test]
fn replies_nobody_asked_for_are_anomalies() {
    for_each_seed(4, |seed| {
        let mut sim = cluster(seed);
        sim.inject(
            NodeId(2),
            NodeId(0),
            Frame::control(Kind::PushReply, NodeId(2), ReqId(77 << 16), 1),
        );
        let mut reply = Frame::new(Kind::PullReply, NodeId(1), ReqId(5 << 16), 0, &[4], 2);
        reply.values_mut().copy_from_slice(&[9.0, 9.0]);
        sim.inject(NodeId(1), NodeId(0), reply);
        sim.run_until_idle().unwrap();
        assert_eq!(anomalies(&sim, 0), 2);
        assert_eq!(
            sim.warnings()
                .iter()
                .filter(|w| w.node == NodeId(0))
                .count(),
            2,
            "{:?}",
            sim.warnings()
        );
        assert!(
            sim.warnings()
                .iter()
                .all(|w| w.message.contains("unknown request")),
            "{:?}",
            sim.warnings()
        );

        // A reply from a node that was not asked neither completes nor breaks a real request.
        let asked: Rc<Cell<Option<ReqId>>> = Rc::default();
        let seen = asked.clone();
        sim.set_tamper(move |f, t, bytes| {
            if (f.0, t.0) == (1, 0) && bytes[0] == Kind::Push as u8 {
                seen.set(Some(decode(bytes).header.req));
            }
        });
        sim.add_script(W1, [Op::push(vec![0], vec![1.0, 1.0]), Op::pull(vec![0])]);
        while asked.get().is_none() {
            assert!(sim.step(), "the push was never delivered");
        }
        sim.inject(
            NodeId(2),
            NodeId(1),
            Frame::control(Kind::PushReply, NodeId(2), asked.get().unwrap(), 1),
        );
        sim.run_until_idle().unwrap();
        assert_eq!(anomalies(&sim, 1), 1);
        let ops: Vec<_> = sim
            .history()
            .of_worker(W1)
            .map(|op| op.outcome.clone())
            .collect();
        assert_eq!(ops, [Outcome::Done, Outcome::Pulled(vec![1.0, 1.0])]);
    });
}

#[test]
fn a_forged_request_is_refused_and_its_rejection_is_an_anomaly_at_the_named_requester() {
    for_each_seed(4, |seed| {
        let mut sim = cluster(seed);
        let mut forged = Frame::new(Kind::Push, NodeId(1), ReqId(5 << 16), 0, &[0, 999], 4);
        forged.values_mut().copy_from_slice(&[1.0; 4]);
        sim.inject(NodeId(1), NodeId(0), forged);
        let short = Frame::new(Kind::Push, NodeId(2), ReqId(6 << 16), 0, &[1, 2], 3);
        sim.inject(NodeId(2), NodeId(0), short);
        sim.run_until_idle().unwrap();
        assert_all_zero(&sim);
        assert_eq!(anomalies(&sim, 0), 0, "refusing is normal for the server");
        assert_eq!(
            (anomalies(&sim, 1), anomalies(&sim, 2)),
            (1, 1),
            "nobody waits for those rejections"
        );
        assert_eq!(sim.link_stats(NodeId(0), NodeId(1)).frames_delivered, 1);
        let reject = sim.link_stats(NodeId(0), NodeId(2));
        assert_eq!(reject.frames_delivered, 1);
    });
}

#[test]
fn undecodable_bytes_break_the_connection() {
    for_each_seed(4, |seed| {
        let mut sim = cluster(seed);
        tamper_first(&mut sim, 1, 0, Kind::Push, |bytes| bytes[2] ^= 0xff); // the magic number
        sim.add_script(W1, [Op::push(vec![0, 5], vec![1.0; 4]), Op::pull(vec![5])]);
        sim.run_until_idle().unwrap();
        let ops: Vec<_> = sim
            .history()
            .of_worker(W1)
            .map(|op| op.outcome.clone())
            .collect();
        assert_eq!(
            ops,
            [
                Outcome::Failed(OpError::PeerGone { peer: NodeId(0) }),
                Outcome::Pulled(vec![1.0, 1.0])
            ],
            "the local key was applied, the remote one was not"
        );
        assert_all_zero_on_node_0(&sim);
        assert!(sim.node(NodeId(0)).is_lost(NodeId(1)) && sim.node(NodeId(1)).is_lost(NodeId(0)));
        assert!(sim.history().faults().iter().any(|f| matches!(
            &f.fault,
            Fault::ProtocolViolation { at: NodeId(0), from: NodeId(1), reason } if reason.contains("magic")
        )));
    });
}

fn assert_all_zero_on_node_0(sim: &Sim) {
    for key in 0..4 {
        assert_eq!(sim.peek(key), Some(vec![0.0, 0.0]), "key {key} changed");
    }
}
