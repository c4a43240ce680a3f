//! The read-by-read check ([`check_per_key_linearizable`]): for every successful read, some
//! placement of the writes in their real-time windows must explain the value read (see the
//! module docs of [`crate::check`]). Necessary for per-key linearizability, cheap, and never a
//! false alarm.
//!
//! Invariant: a read is judged only against writes to its own key, component by component.

use std::fmt;

use roam_core::Key;

use crate::history::{History, OpKind, OpRecord};

use super::subset::subset_sum_reaches;

/// A read that no placement of the writes explains.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    /// History index of the read.
    pub read: usize,
    /// The key.
    pub key: Key,
    /// Index of the value component.
    pub component: usize,
    /// The value the read returned.
    pub observed: f32,
    /// The read and the writes on the key, for the failure message.
    pub context: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "op #{} read {} from key {} (component {}), which no order of the writes explains:\n{}",
            self.read, self.observed, self.key, self.component, self.context
        )
    }
}

impl std::error::Error for Violation {}

/// One write to one component of one key.
#[derive(Clone, Copy, Debug)]
struct Write {
    component: usize,
    set: bool,
    value: f32,
    invoke: u64,
    /// Return sequence number if the write certainly took effect; `u64::MAX` otherwise.
    ret: u64,
}

/// Checks every successful pull of `history`; returns the number of (key, component) reads
/// checked, or the first violation.
pub fn check_per_key_linearizable(history: &History) -> Result<usize, Violation> {
    let space = history.space();
    let mut writes: Vec<Vec<Write>> = vec![Vec::new(); history.key_bound() as usize];
    for op in history.ops() {
        if !matches!(op.kind, OpKind::Push | OpKind::Set) {
            continue;
        }
        let ret = if op.succeeded() {
            op.ret.map_or(u64::MAX, |r| r.seq)
        } else {
            u64::MAX
        };
        for (key, vals) in op.writes(space) {
            for (component, &value) in vals.iter().enumerate() {
                writes[key as usize].push(Write {
                    component,
                    set: op.kind == OpKind::Set,
                    value,
                    invoke: op.invoke.seq,
                    ret,
                });
            }
        }
    }
    let mut checked = 0;
    for read in history
        .ops()
        .iter()
        .filter(|op| op.kind == OpKind::Pull && op.succeeded())
    {
        let (ri, rr) = (read.invoke.seq, read.ret.map_or(u64::MAX, |r| r.seq));
        for (key, vals) in read
            .reads(space)
            .filter(|&(k, _)| !history.is_replicated(k))
        {
            for (c, &observed) in vals.iter().enumerate() {
                let on_key: Vec<Write> = writes[key as usize]
                    .iter()
                    .copied()
                    .filter(|w| w.component == c)
                    .collect();
                if !explained(&on_key, ri, rr, observed) {
                    return Err(Violation {
                        read: read.id,
                        key,
                        component: c,
                        observed,
                        context: context(history, read, key),
                    });
                }
                checked += 1;
            }
        }
    }
    Ok(checked)
}

/// Whether some last overwrite plus some admissible subset of adds yields `observed` for a read
/// invoked at `ri` and returned at `rr`.
fn explained(writes: &[Write], ri: u64, rr: u64, observed: f32) -> bool {
    // `None` is the initial zero value: before everything, certainly returned.
    let bases = std::iter::once(None).chain(
        writes
            .iter()
            .enumerate()
            .filter(|(_, w)| w.set && w.invoke < rr)
            .map(Some),
    );
    for base in bases {
        let (base_idx, base_inv, base_ret, base_val) = match base {
            None => (usize::MAX, 0, 0, 0.0f32),
            Some((i, s)) => (i, s.invoke, s.ret, s.value),
        };
        let certainly_after_base = |w: &Write| base.is_none() || w.invoke > base_ret;
        let certainly_before_read = |w: &Write| w.ret < ri;
        let overwritten = writes.iter().enumerate().any(|(i, w)| {
            w.set && i != base_idx && certainly_after_base(w) && certainly_before_read(w)
        });
        if overwritten {
            continue;
        }
        let mut must = f64::from(base_val);
        let mut may = Vec::new();
        for w in writes.iter().filter(|w| !w.set) {
            if certainly_after_base(w) && certainly_before_read(w) {
                must += f64::from(w.value);
            } else if w.invoke < rr && !(base.is_some() && w.ret < base_inv) {
                may.push(f64::from(w.value));
            }
        }
        if subset_sum_reaches(&may, f64::from(observed) - must) {
            return true;
        }
    }
    false
}

/// Whether some subset of `values` sums to `target`: exactly for small integers, else by bounds.
fn context(history: &History, read: &OpRecord, key: Key) -> String {
    let mut out = format!("  read:  {read}\n");
    for op in history.ops() {
        if matches!(op.kind, OpKind::Push | OpKind::Set) && op.keys.contains(&key) {
            out += &format!("  write: {op}\n");
        }
    }
    out
}

// ----- complete per-key linearizability ------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Outcome, Stamp};
    use crate::worker::WorkerRef;
    use roam_core::{KeySpace, Time};

    fn op(
        id: usize,
        kind: OpKind,
        input: Vec<f32>,
        inv: u64,
        ret: u64,
        outcome: Outcome,
    ) -> OpRecord {
        OpRecord {
            id,
            worker: WorkerRef::new(0, id as u32),
            program_index: 0,
            kind,
            keys: vec![0],
            input,
            sync: true,
            invoke: Stamp {
                time: Time(inv),
                seq: inv,
            },
            ret: Some(Stamp {
                time: Time(ret),
                seq: ret,
            }),
            outcome,
        }
    }

    fn history(ops: Vec<OpRecord>) -> History {
        let mut h = History::new(KeySpace::uniform(1, 1).unwrap());
        for o in ops {
            h.invoke(o);
        }
        h
    }

    #[test]
    fn completed_adds_must_be_seen() {
        let h = history(vec![
            op(0, OpKind::Push, vec![2.0], 1, 2, Outcome::Done),
            op(1, OpKind::Pull, vec![], 3, 4, Outcome::Pulled(vec![0.0])),
        ]);
        assert!(
            check_per_key_linearizable(&h).is_err(),
            "stale read must be flagged"
        );
        let h = history(vec![
            op(0, OpKind::Push, vec![2.0], 1, 2, Outcome::Done),
            op(1, OpKind::Pull, vec![], 3, 4, Outcome::Pulled(vec![2.0])),
        ]);
        assert_eq!(check_per_key_linearizable(&h), Ok(1));
    }

    #[test]
    fn concurrent_adds_may_or_may_not_be_seen_but_not_invented() {
        let base = |seen: f32| {
            history(vec![
                op(0, OpKind::Push, vec![1.0], 1, 2, Outcome::Done),
                op(1, OpKind::Push, vec![4.0], 3, 10, Outcome::Done),
                op(2, OpKind::Pull, vec![], 5, 6, Outcome::Pulled(vec![seen])),
            ])
        };
        assert!(check_per_key_linearizable(&base(1.0)).is_ok());
        assert!(check_per_key_linearizable(&base(5.0)).is_ok());
        assert!(
            check_per_key_linearizable(&base(4.0)).is_err(),
            "missed the completed add"
        );
        assert!(
            check_per_key_linearizable(&base(3.0)).is_err(),
            "value from nowhere"
        );
    }

    #[test]
    fn a_set_hides_earlier_adds_and_a_later_set_hides_it() {
        let h = history(vec![
            op(0, OpKind::Push, vec![1.0], 1, 2, Outcome::Done),
            op(1, OpKind::Set, vec![7.0], 3, 4, Outcome::Done),
            op(2, OpKind::Pull, vec![], 5, 6, Outcome::Pulled(vec![7.0])),
            op(3, OpKind::Set, vec![9.0], 7, 8, Outcome::Done),
            op(4, OpKind::Pull, vec![], 9, 10, Outcome::Pulled(vec![7.0])),
        ]);
        let err = check_per_key_linearizable(&h).unwrap_err();
        assert_eq!(err.read, 4, "{err}");
    }

    #[test]
    fn failed_writes_may_have_happened() {
        let h = history(vec![
            op(
                0,
                OpKind::Push,
                vec![3.0],
                1,
                2,
                Outcome::Failed(roam_core::OpError::ShuttingDown),
            ),
            op(1, OpKind::Pull, vec![], 3, 4, Outcome::Pulled(vec![3.0])),
            op(2, OpKind::Pull, vec![], 5, 6, Outcome::Pulled(vec![0.0])),
        ]);
        assert_eq!(check_per_key_linearizable(&h), Ok(2));
    }
}
