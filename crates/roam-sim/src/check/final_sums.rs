//! Independent accounting of final values ([`final_sums`], [`check_final_sums_exact`]): a key's
//! final value must be its last set plus exactly the pushes after it, with only pushes that
//! failed because a peer was lost allowed to be missing.
//!
//! Invariant: the verdict depends on the history and the final values alone, never on how the
//! simulator got there.

use roam_core::{Key, OpError};

use super::subset::subset_sum_reaches;
use crate::history::{History, OpKind, OpRecord, Outcome};

/// How a key's final value compares with the writes of the history (see [`final_sums`]).
#[derive(Clone, Debug, PartialEq)]
pub enum FinalVerdict {
    /// Equal to the last set (or zero) plus exactly the pushes after it; none may be missing.
    Exact,
    /// Equal to the last set plus every successful push after it plus some of the pushes that
    /// failed because a peer was lost (or never completed): `optional` of them were in doubt.
    WithinLosses {
        /// Pushes that may or may not have been applied.
        optional: usize,
    },
    /// The history does not say which set came last or whether a push came after it (a failed
    /// set, or a successful write concurrent with the last set): not checked.
    Ambiguous(String),
    /// No live node holds the key (it was lost with a peer, or in transit when a link broke).
    Vanished,
    /// The value is not explained: an update was lost or applied twice.
    Wrong(String),
}

/// The final-value verdict of one key.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyFinal {
    /// The key.
    pub key: Key,
    /// The verdict.
    pub verdict: FinalVerdict,
}

/// Accounts for every key's final value independently of any order search: the key's last set
/// `S` (the successful set invoked last, which must certainly follow every other set; zero if
/// there is none) plus the sum of the pushes certainly after `S` (invoked after `S` returned).
/// Pushes certainly before `S` are overwritten. Successful pushes must all be in the sum; pushes
/// that failed with [`OpError::PeerGone`], or never completed, may or may not be; a push that
/// failed for any other reason must not have been applied, so it is a `Wrong` verdict as soon
/// as it could matter. `finals[k]` is key `k`'s value at the end of the run, after every op
/// has returned or failed (`None` if no node holds it).
///
/// Values should be small integers so that sums are exact in `f32` in any order; the optional
/// pushes are then matched by an exact subset sum.
pub fn final_sums(history: &History, finals: &[Option<Vec<f32>>]) -> Vec<KeyFinal> {
    history
        .keys_checked()
        .into_iter()
        .map(|key| KeyFinal {
            key,
            verdict: final_verdict(history, key, finals.get(key as usize).cloned().flatten()),
        })
        .collect()
}

/// [`final_sums`], requiring every key to be [`FinalVerdict::Exact`] (a fault-free run);
/// returns the number of keys checked.
pub fn check_final_sums_exact(
    history: &History,
    finals: &[Option<Vec<f32>>],
) -> Result<usize, String> {
    let verdicts = final_sums(history, finals);
    for v in &verdicts {
        if v.verdict != FinalVerdict::Exact {
            return Err(format!("key {}: {:?}", v.key, v.verdict));
        }
    }
    Ok(verdicts.len())
}

fn final_verdict(history: &History, key: Key, last: Option<Vec<f32>>) -> FinalVerdict {
    let space = history.space();
    let on_key = |op: &&OpRecord| op.keys.contains(&key);
    let writes: Vec<&OpRecord> = history
        .ops()
        .iter()
        .filter(|op| matches!(op.kind, OpKind::Push | OpKind::Set))
        .filter(on_key)
        .collect();
    let value_of = |op: &OpRecord| -> Vec<f32> {
        let mut sum = vec![0.0f32; space.len(key)];
        for (k, vals) in op.writes(space) {
            if k == key {
                // A key named twice in one push is added twice; in one set, the last one wins.
                match op.kind {
                    OpKind::Set => sum.copy_from_slice(vals),
                    _ => sum.iter_mut().zip(vals).for_each(|(s, v)| *s += v),
                }
            }
        }
        sum
    };
    let ret = |op: &OpRecord| {
        if op.succeeded() {
            op.ret.map_or(u64::MAX, |r| r.seq)
        } else {
            u64::MAX
        }
    };
    if let Some(failed) = writes
        .iter()
        .find(|op| op.kind == OpKind::Set && !op.succeeded())
    {
        return FinalVerdict::Ambiguous(format!("set #{} failed or never completed", failed.id));
    }
    let last_set = writes
        .iter()
        .filter(|op| op.kind == OpKind::Set)
        .max_by_key(|op| op.invoke.seq);
    let (base, s_invoke, s_ret) = match last_set {
        Some(s) => {
            if let Some(other) = writes
                .iter()
                .find(|op| op.kind == OpKind::Set && op.id != s.id && ret(op) > s.invoke.seq)
            {
                return FinalVerdict::Ambiguous(format!(
                    "sets #{} and #{} may be in either order",
                    other.id, s.id
                ));
            }
            (value_of(s), s.invoke.seq, ret(s))
        }
        None => (vec![0.0; space.len(key)], 0, 0),
    };
    let mut must = base;
    let mut may: Vec<Vec<f32>> = Vec::new();
    for p in writes.iter().filter(|op| op.kind == OpKind::Push) {
        let certainly_before = last_set.is_some() && ret(p) < s_invoke;
        let certainly_after = last_set.is_none() || p.invoke.seq > s_ret;
        match &p.outcome {
            Outcome::Done if certainly_after => {
                must.iter_mut().zip(value_of(p)).for_each(|(m, v)| *m += v);
            }
            Outcome::Done if certainly_before => {}
            Outcome::Done => {
                return FinalVerdict::Ambiguous(format!(
                    "push #{} is concurrent with the last set",
                    p.id
                ));
            }
            Outcome::Failed(OpError::PeerGone { .. }) | Outcome::Pending => {
                if !certainly_before {
                    may.push(value_of(p));
                }
            }
            Outcome::Failed(err) => {
                if !certainly_before {
                    return FinalVerdict::Wrong(format!(
                        "push #{} failed with {err}, yet could count",
                        p.id
                    ));
                }
            }
            Outcome::Pulled(_) => unreachable!("pushes do not pull"),
        }
    }
    let Some(last) = last else {
        return FinalVerdict::Vanished;
    };
    for c in 0..must.len() {
        let target = f64::from(last[c]) - f64::from(must[c]);
        let options: Vec<f64> = may.iter().map(|v| f64::from(v[c])).collect();
        let ok = if options.is_empty() {
            last[c] == must[c]
        } else {
            subset_sum_reaches(&options, target)
        };
        if !ok {
            return FinalVerdict::Wrong(format!(
                "component {c} is {} but the last set and the pushes after it give {}{}",
                last[c],
                must[c],
                if options.is_empty() {
                    String::new()
                } else {
                    format!(" plus some of {options:?}")
                }
            ));
        }
    }
    if may.is_empty() {
        FinalVerdict::Exact
    } else {
        FinalVerdict::WithinLosses {
            optional: may.len(),
        }
    }
}
