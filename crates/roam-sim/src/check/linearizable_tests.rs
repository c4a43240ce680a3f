//! Tests of the complete linearizability checker and of the final-sum accounting, on
//! hand-built histories (known-good and known-bad) and random ones.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use roam_core::{KeySpace, NodeId, OpError, Time};

use super::*;
use crate::check::{FinalVerdict, check_final_sums_exact, check_per_key_linearizable, final_sums};
use crate::history::{History, OpKind, OpRecord};
use crate::history::{Outcome, Stamp};
use crate::worker::WorkerRef;

/// One op on key 0 of a one-key, one-value space: `(worker, kind, value, invoke, ret,
/// outcome)`; program indices follow the order of the list per worker.
type Spec = (u32, OpKind, f32, u64, u64, Outcome);

fn history(specs: &[Spec]) -> History {
    let mut h = History::new(KeySpace::uniform(1, 1).unwrap());
    let mut counts = [0usize; 16];
    let mut specs: Vec<&Spec> = specs.iter().collect();
    specs.sort_by_key(|s| s.3);
    for &(worker, kind, value, inv, ret, ref outcome) in specs {
        let input = if matches!(kind, OpKind::Push | OpKind::Set) {
            vec![value]
        } else {
            vec![]
        };
        let stamp = |t: u64| Stamp {
            time: Time(t),
            seq: t,
        };
        h.invoke(OpRecord {
            id: 0,
            worker: WorkerRef::new(0, worker),
            program_index: counts[worker as usize],
            kind,
            keys: vec![0],
            input,
            sync: false,
            invoke: stamp(inv),
            ret: (*outcome != Outcome::Pending).then(|| stamp(ret)),
            outcome: outcome.clone(),
        });
        counts[worker as usize] += 1;
    }
    h
}

fn read(v: f32) -> Outcome {
    Outcome::Pulled(vec![v])
}

fn lin(h: &History) -> bool {
    check_linearizable(h, Consistency::linearizable(), None).is_ok()
}

fn pram(h: &History) -> bool {
    check_linearizable(h, Consistency::with_program_order(), None).is_ok()
}

use OpKind::{Pull, Push, Set};
const DONE: Outcome = Outcome::Done;

#[test]
fn a_stale_read_is_rejected() {
    let h = history(&[(0, Push, 2.0, 1, 2, DONE), (1, Pull, 0.0, 3, 4, read(0.0))]);
    let err = check_linearizable(&h, Consistency::linearizable(), None).unwrap_err();
    assert_eq!(err.key, 0);
    assert!(err.to_string().contains("no order"), "{err}");
    assert!(lin(&history(&[
        (0, Push, 2.0, 1, 2, DONE),
        (1, Pull, 0.0, 3, 4, read(2.0))
    ])));
}

#[test]
fn replicated_keys_are_skipped_by_every_checker() {
    // A stale read and a final value missing a completed push: violations of key 0, unless
    // key 0 is replicated (only eventually consistent).
    let h = history(&[(0, Push, 2.0, 1, 2, DONE), (1, Pull, 0.0, 3, 4, read(0.0))]);
    let finals = [Some(vec![0.0])];
    assert!(check_linearizable(&h, Consistency::linearizable(), Some(&finals)).is_err());
    assert!(check_per_key_linearizable(&h).is_err());
    assert!(check_final_sums_exact(&h, &finals).is_err());
    let h = h.with_replicated([0]);
    assert!(h.is_replicated(0));
    assert!(h.keys_checked().is_empty());
    let report = check_linearizable(&h, Consistency::with_program_order(), Some(&finals)).unwrap();
    assert_eq!(report.keys, 0);
    assert_eq!(check_per_key_linearizable(&h), Ok(0));
    assert_eq!(check_final_sums_exact(&h, &finals), Ok(0));
}

#[test]
fn values_from_nowhere_and_double_applied_updates_are_rejected() {
    let base = [(0, Push, 1.0, 1, 2, DONE), (1, Push, 4.0, 3, 10, DONE)];
    for (seen, ok) in [
        (1.0, true),
        (5.0, true),
        (4.0, false),
        (3.0, false),
        (6.0, false),
        (2.0, false),
    ] {
        let mut h = base.to_vec();
        h.push((2, Pull, 0.0, 5, 6, read(seen)));
        assert_eq!(lin(&history(&h)), ok, "read {seen}");
    }
}

#[test]
fn the_final_value_must_hold_every_completed_update_exactly_once() {
    let h = history(&[
        (0, Push, 1.0, 1, 4, DONE),
        (1, Push, 2.0, 2, 3, DONE),
        (2, Push, 4.0, 5, 6, DONE),
    ]);
    let check =
        |v: f32| check_linearizable(&h, Consistency::linearizable(), Some(&[Some(vec![v])]));
    assert!(check(7.0).is_ok());
    assert!(check(6.0).is_err(), "a lost update");
    assert!(check(8.0).is_err(), "an update applied twice");
    // A push that failed because a peer was lost may or may not be in the final value.
    let gone = Outcome::Failed(OpError::PeerGone { peer: NodeId(1) });
    let h = history(&[(0, Push, 1.0, 1, 2, DONE), (1, Push, 2.0, 3, 4, gone)]);
    for (v, ok) in [(1.0, true), (3.0, true), (2.0, false), (5.0, false)] {
        let r = check_linearizable(&h, Consistency::linearizable(), Some(&[Some(vec![v])]));
        assert_eq!(r.is_ok(), ok, "final {v}");
    }
}

/// Two readers see two concurrent sets in opposite orders. Each read alone is explainable,
/// so the read-by-read checker accepts it; no single order explains both.
#[test]
fn reads_that_need_two_different_orders_are_rejected() {
    let h = history(&[
        (0, Set, 1.0, 1, 20, DONE),
        (1, Set, 2.0, 2, 20, DONE),
        (2, Pull, 0.0, 3, 4, read(1.0)),
        (2, Pull, 0.0, 5, 6, read(2.0)),
        (3, Pull, 0.0, 7, 8, read(1.0)),
    ]);
    assert!(
        check_per_key_linearizable(&h).is_ok(),
        "the weaker checker misses it"
    );
    assert!(!lin(&h));
}

#[test]
fn program_order_catches_reordered_async_ops_of_one_worker() {
    // Worker 0 issues set 1 then set 2 without waiting; a later read sees 1.
    let h = history(&[
        (0, Set, 1.0, 1, 10, DONE),
        (0, Set, 2.0, 2, 11, DONE),
        (1, Pull, 0.0, 12, 13, read(1.0)),
    ]);
    assert!(lin(&h), "linearizable: the windows overlap");
    assert!(!pram(&h), "but not in worker 0's order");
    // Its own async read issued after an async push must see the push.
    let h = history(&[(0, Push, 5.0, 1, 10, DONE), (0, Pull, 0.0, 2, 9, read(0.0))]);
    assert!(lin(&h) && !pram(&h));
    let h = history(&[(0, Push, 5.0, 1, 10, DONE), (0, Pull, 0.0, 2, 9, read(5.0))]);
    assert!(pram(&h));
}

#[test]
fn a_bounded_search_reports_that_it_gave_up() {
    let mut specs: Vec<Spec> = (0..14)
        .map(|i| (i, Push, f32::from(1u16 << i), 1 + i as u64, 100, DONE))
        .collect();
    specs.push((15, Pull, 0.0, 50, 60, read(-1.0)));
    let h = history(&specs);
    let opts = Consistency {
        max_states: 500,
        ..Consistency::linearizable()
    };
    let err = check_linearizable(&h, opts, None).unwrap_err();
    assert!(err.reason.contains("gave up"), "{err}");
    // Unbounded, the search proves it impossible (2^14 subsets, memoised).
    let err = check_linearizable(
        &h,
        Consistency {
            max_states: 0,
            ..opts
        },
        None,
    )
    .unwrap_err();
    assert!(err.reason.contains("no order"), "{err}");
}

/// The definition, by brute force: some order of all successful ops and any subset of the
/// failed writes respects real time (and program order) and explains every read.
fn oracle(h: &History, program_order: bool) -> bool {
    let ops: Vec<&OpRecord> = h
        .ops()
        .iter()
        .filter(|o| o.kind != Pull || o.succeeded())
        .collect();
    let required: Vec<bool> = ops.iter().map(|o| o.succeeded()).collect();
    let ret = |o: &OpRecord| {
        if o.succeeded() {
            o.ret.unwrap().seq
        } else {
            u64::MAX
        }
    };
    let n = ops.len();
    let mut order = Vec::new();
    let mut used = vec![false; n];
    fn go(
        ops: &[&OpRecord],
        required: &[bool],
        ret: &dyn Fn(&OpRecord) -> u64,
        po: bool,
        order: &mut Vec<usize>,
        used: &mut Vec<bool>,
    ) -> bool {
        // Check a complete candidate: all required used.
        if required.iter().zip(used.iter()).all(|(r, u)| !r || *u) {
            let mut v = 0.0f32;
            let mut ok = true;
            for &i in order.iter() {
                match ops[i].kind {
                    Push => v += ops[i].input[0],
                    Set => v = ops[i].input[0],
                    _ => ok &= ops[i].outcome == Outcome::Pulled(vec![v]),
                }
            }
            if ok {
                return true;
            }
        }
        for i in 0..ops.len() {
            if used[i] {
                continue;
            }
            // Real time: nothing unused may have returned before `i` was invoked; program
            // order: no unused required earlier op of the same worker.
            let blocked = (0..ops.len()).any(|j| {
                !used[j]
                    && j != i
                    && ((required[j] && ret(ops[j]) < ops[i].invoke.seq)
                        || (po
                            && required[j]
                            && required[i]
                            && ops[j].worker == ops[i].worker
                            && ops[j].program_index < ops[i].program_index))
            });
            if blocked {
                continue;
            }
            used[i] = true;
            order.push(i);
            if go(ops, required, ret, po, order, used) {
                return true;
            }
            order.pop();
            used[i] = false;
        }
        false
    }
    go(&ops, &required, &ret, program_order, &mut order, &mut used)
}

/// Random small histories, from a true execution (so often valid), with a read value
/// sometimes perturbed: the search and the brute-force oracle always agree.
#[test]
fn the_search_agrees_with_brute_force_on_random_small_histories() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let (mut valid, mut invalid, mut po_only) = (0, 0, 0);
    for _ in 0..3000 {
        let n = rng.random_range(1..=6);
        // A true execution: op i takes effect at time 10 * i + 5; windows around it.
        let mut specs: Vec<Spec> = Vec::new();
        let mut value = 0.0f32;
        let mut points: Vec<u64> = (0..n).map(|i| 10 * i as u64 + 5).collect();
        // Sometimes swap two effect points so per-worker order may break.
        if rng.random_bool(0.3) && n > 1 {
            let a = rng.random_range(0..n);
            let b = rng.random_range(0..n);
            points.swap(a, b);
        }
        let mut by_point: Vec<usize> = (0..n).collect();
        by_point.sort_by_key(|&i| points[i]);
        let mut kinds = Vec::new();
        for _ in 0..n {
            kinds.push(match rng.random_range(0..3) {
                0 => Pull,
                1 => Push,
                _ => Set,
            });
        }
        let inputs: Vec<f32> = (0..n)
            .map(|_| f32::from(rng.random_range(1u8..=3)))
            .collect();
        let mut reads = vec![0.0f32; n];
        for &i in &by_point {
            match kinds[i] {
                Push => value += inputs[i],
                Set => value = inputs[i],
                _ => reads[i] = value,
            }
        }
        let mut used_seqs = std::collections::HashSet::new();
        let mut fresh = |lo: u64, hi: u64, rng: &mut ChaCha8Rng| loop {
            let t = rng.random_range(lo..=hi) * 2 + 1;
            if used_seqs.insert(t) {
                return t;
            }
        };
        for i in 0..n {
            let p = points[i] * 2;
            let inv = fresh(points[i].saturating_sub(25), points[i] - 1, &mut rng).min(p - 1);
            let ret = fresh(points[i], points[i] + 25, &mut rng).max(p + 1);
            let worker = rng.random_range(0..3);
            let mut outcome = match kinds[i] {
                Pull => read(reads[i]),
                _ => DONE,
            };
            if kinds[i] == Pull && rng.random_bool(0.25) {
                outcome = read(reads[i] + f32::from(rng.random_range(1u8..=2)));
            }
            if kinds[i] != Pull && rng.random_bool(0.1) {
                outcome = Outcome::Failed(OpError::PeerGone { peer: NodeId(1) });
            }
            specs.push((worker, kinds[i], inputs[i], inv, ret, outcome));
        }
        let h = history(&specs);
        let (l, p) = (lin(&h), pram(&h));
        assert_eq!(
            l,
            oracle(&h, false),
            "linearizability verdicts differ on\n{:#?}",
            h.ops()
        );
        assert_eq!(
            p,
            oracle(&h, true),
            "program-order verdicts differ on\n{:#?}",
            h.ops()
        );
        assert!(!p || l, "program order only adds constraints");
        match (l, p) {
            (true, true) => valid += 1,
            (true, false) => po_only += 1,
            _ => invalid += 1,
        }
    }
    assert!(
        valid > 500 && invalid > 300 && po_only > 30,
        "{valid} {invalid} {po_only}"
    );
}

#[test]
fn vector_subset_sums_match_brute_force() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for _ in 0..2000 {
        let dims = rng.random_range(1..=3);
        let n = rng.random_range(0..=8);
        let items: Vec<Vec<f32>> = (0..n)
            .map(|_| {
                (0..dims)
                    .map(|_| f32::from(rng.random_range(0u8..=5)))
                    .collect()
            })
            .collect();
        let target: Vec<f64> = (0..dims)
            .map(|_| f64::from(rng.random_range(0u8..=14)))
            .collect();
        let brute = (0..1u32 << n).any(|mask| {
            (0..dims).all(|c| {
                let sum: f64 = (0..n)
                    .filter(|i| mask & (1 << i) != 0)
                    .map(|i| f64::from(items[i][c]))
                    .sum();
                sum == target[c]
            })
        });
        let refs: Vec<&[f32]> = items.iter().map(Vec::as_slice).collect();
        let fast = vector_subset_hits(&target, &refs);
        if dims == 1 {
            assert_eq!(fast, brute, "{target:?} {items:?}");
        } else {
            assert!(
                fast || !brute,
                "pruning must never reject a reachable target: {target:?} {items:?}"
            );
            // Small targets are exact.
            assert_eq!(fast, brute, "{target:?} {items:?}");
        }
    }
}

#[test]
fn final_sums_count_exactly_the_pushes_after_the_last_set() {
    let gone = Outcome::Failed(OpError::PeerGone { peer: NodeId(1) });
    let h = history(&[
        (0, Push, 1.0, 1, 2, DONE),
        (0, Set, 10.0, 3, 4, DONE),
        (1, Push, 2.0, 5, 6, DONE),
        (2, Push, 4.0, 7, 8, gone.clone()),
    ]);
    let verdict = |v: f32| final_sums(&h, &[Some(vec![v])])[0].verdict.clone();
    assert_eq!(verdict(12.0), FinalVerdict::WithinLosses { optional: 1 });
    assert_eq!(verdict(16.0), FinalVerdict::WithinLosses { optional: 1 });
    assert!(
        matches!(verdict(13.0), FinalVerdict::Wrong(_)),
        "the overwritten push counted"
    );
    assert!(
        matches!(verdict(10.0), FinalVerdict::Wrong(_)),
        "a successful push lost"
    );
    assert!(
        matches!(verdict(14.0), FinalVerdict::Wrong(_)),
        "applied twice"
    );
    assert_eq!(final_sums(&h, &[None])[0].verdict, FinalVerdict::Vanished);
    let exact = history(&[
        (0, Set, 10.0, 1, 2, DONE),
        (1, Push, 2.0, 5, 6, DONE),
        (1, Push, 2.0, 7, 8, DONE),
    ]);
    assert_eq!(check_final_sums_exact(&exact, &[Some(vec![14.0])]), Ok(1));
    assert!(check_final_sums_exact(&exact, &[Some(vec![12.0])]).is_err());
    let racy = history(&[(0, Set, 10.0, 1, 4, DONE), (1, Push, 2.0, 2, 3, DONE)]);
    assert!(matches!(
        final_sums(&racy, &[Some(vec![10.0])])[0].verdict,
        FinalVerdict::Ambiguous(_)
    ));
    let rejected = Outcome::Failed(OpError::Rejected {
        peer: NodeId(0),
        reason: "x".into(),
    });
    let h = history(&[(0, Push, 1.0, 1, 2, rejected)]);
    assert!(matches!(
        final_sums(&h, &[Some(vec![1.0])])[0].verdict,
        FinalVerdict::Wrong(_)
    ));
}
