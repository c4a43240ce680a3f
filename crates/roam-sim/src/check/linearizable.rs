//! The complete per-key linearizability checker ([`check_linearizable`]): a search for one total
//! order per key that respects real time (and, with [`Consistency::program_order`], each worker's
//! issue order) and explains every value read, with Lowe's memoisation of visited states.
//!
//! Invariant: the search explores orders of the key's entries only; a failed or pending write may
//! be placed anywhere after its invocation or left out, never before it.

use std::collections::HashSet;
use std::fmt;

use roam_core::Key;

use crate::history::{History, OpKind};

use super::subset::vector_subset_hits;

/// What [`check_linearizable`] requires besides one real-time-respecting order per key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Consistency {
    /// The ops of one worker on one key must also take effect in the order the worker issued
    /// them, asynchronous ones included (failed ones excepted: they may happen at any time).
    pub program_order: bool,
    /// Give up on a key after visiting this many search states (0: no bound). The search is
    /// exponential in the worst case; a key that exceeds the bound is reported as a violation
    /// saying so, never silently accepted.
    pub max_states: u64,
}

impl Consistency {
    /// Linearizability per key (real-time order only), with a bound of ten million states.
    pub fn linearizable() -> Self {
        Self {
            program_order: false,
            max_states: 10_000_000,
        }
    }

    /// Linearizability per key plus per-worker program order.
    pub fn with_program_order() -> Self {
        Self {
            program_order: true,
            ..Self::linearizable()
        }
    }
}

/// What [`check_linearizable`] checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinearizableReport {
    /// Keys with at least one op.
    pub keys: usize,
    /// (key, op) pairs placed, final reads included.
    pub entries: usize,
    /// (key, read) pairs among them.
    pub reads: usize,
    /// Search states visited, over all keys.
    pub states: u64,
}

/// A key whose ops no order explains.
#[derive(Clone, Debug, PartialEq)]
pub struct NotLinearizable {
    /// The key.
    pub key: Key,
    /// Why: no order exists, or the search bound was hit.
    pub reason: String,
    /// The key's ops (and how far the search got), for the failure message.
    pub context: String,
}

impl fmt::Display for NotLinearizable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key {}: {}\n{}", self.key, self.reason, self.context)
    }
}

impl std::error::Error for NotLinearizable {}

#[derive(Clone, Debug, PartialEq)]
enum Effect {
    Add(Vec<f32>),
    Set(Vec<f32>),
    Read(Vec<f32>),
}

/// One op's effect on one key.
#[derive(Clone, Debug)]
struct Entry {
    /// History index, or `None` for the virtual final read.
    op: Option<usize>,
    call: u64,
    /// `u64::MAX` for optional entries (failed or pending writes).
    ret: u64,
    optional: bool,
    effect: Effect,
    /// With program order: the previous required entry of the same worker on this key.
    pred: Option<usize>,
}

/// Checks that every key's ops are linearizable (see the module docs and [`Consistency`]).
///
/// `finals`, if given, holds each key's value at the end of the run (`None` if no node holds
/// it): it is checked as a read that follows every op, so the final state must be explained
/// too: no completed update lost or applied twice.
pub fn check_linearizable(
    history: &History,
    opts: Consistency,
    finals: Option<&[Option<Vec<f32>>]>,
) -> Result<LinearizableReport, NotLinearizable> {
    let space = history.space();
    let num_keys = history.key_bound() as usize;
    let mut per_key: Vec<Vec<Entry>> = vec![Vec::new(); num_keys];
    let mut last_seq = 0;
    for op in history.ops() {
        last_seq = last_seq.max(op.invoke.seq).max(op.ret.map_or(0, |r| r.seq));
        let (call, ret) = (op.invoke.seq, op.ret.map_or(u64::MAX, |r| r.seq));
        match op.kind {
            OpKind::Push | OpKind::Set => {
                let optional = !op.succeeded();
                for (key, vals) in op.writes(space) {
                    if history.is_replicated(key) {
                        continue;
                    }
                    let effect = if op.kind == OpKind::Set {
                        Effect::Set(vals.to_vec())
                    } else {
                        Effect::Add(vals.to_vec())
                    };
                    let ret = if optional { u64::MAX } else { ret };
                    per_key[key as usize].push(Entry {
                        op: Some(op.id),
                        call,
                        ret,
                        optional,
                        effect,
                        pred: None,
                    });
                }
            }
            OpKind::Gradient => panic!(
                "op #{}: gradients of a stateful optimizer are not modelled by this checker \
                 (SGD's are recorded as pushes)",
                op.id
            ),
            OpKind::Pull => {
                for (key, vals) in op.reads(space) {
                    if history.is_replicated(key) {
                        continue;
                    }
                    let effect = Effect::Read(vals.to_vec());
                    per_key[key as usize].push(Entry {
                        op: Some(op.id),
                        call,
                        ret,
                        optional: false,
                        effect,
                        pred: None,
                    });
                }
            }
            OpKind::Barrier
            | OpKind::Localize
            | OpKind::MoveHome
            | OpKind::SyncReplicas
            | OpKind::Checkpoint
            | OpKind::Drain => {}
        }
    }
    if let Some(finals) = finals {
        for (key, value) in finals.iter().enumerate().take(num_keys) {
            if let Some(value) = value
                && !history.is_replicated(key as Key)
            {
                let effect = Effect::Read(value.clone());
                per_key[key].push(Entry {
                    op: None,
                    call: last_seq + 1,
                    ret: last_seq + 2,
                    optional: false,
                    effect,
                    pred: None,
                });
            }
        }
    }
    let mut report = LinearizableReport::default();
    for (key, mut entries) in per_key.into_iter().enumerate() {
        if entries.is_empty() {
            continue;
        }
        if opts.program_order {
            link_program_order(history, &mut entries);
        }
        report.keys += 1;
        report.entries += entries.len();
        report.reads += entries
            .iter()
            .filter(|e| matches!(e.effect, Effect::Read(_)))
            .count();
        let len = space.len(key as Key);
        let mut search = Search::new(&entries, len, opts.max_states);
        let found = search.run();
        report.states += search.states;
        if !found {
            let reason = if search.exhausted_bound {
                format!(
                    "search gave up after {} states (raise Consistency::max_states)",
                    search.states
                )
            } else if opts.program_order {
                "no order of its ops respects real time and every worker's program order and explains every value read".into()
            } else {
                "no order of its ops respects real time and explains every value read".into()
            };
            return Err(NotLinearizable {
                key: key as Key,
                reason,
                context: describe(history, &entries, &search.best),
            });
        }
    }
    Ok(report)
}

/// Links every required entry to the previous required entry of the same worker.
fn link_program_order(history: &History, entries: &mut [Entry]) {
    let mut order: Vec<usize> = (0..entries.len())
        .filter(|&i| !entries[i].optional && entries[i].op.is_some())
        .collect();
    order.sort_by_key(|&i| {
        let op = &history.ops()[entries[i].op.expect("filtered")];
        (op.worker, op.program_index)
    });
    for pair in order.windows(2) {
        let (a, b) = (
            &history.ops()[entries[pair[0]].op.unwrap()],
            &history.ops()[entries[pair[1]].op.unwrap()],
        );
        if a.worker == b.worker {
            entries[pair[1]].pred = Some(pair[0]);
        }
    }
}

/// A search state: which entries are placed, and the value's bits.
type Visited = (Box<[u64]>, Box<[u32]>);

struct Search<'a> {
    entries: &'a [Entry],
    /// Candidate order: by return (earliest deadline first), optional entries last.
    by_deadline: Vec<usize>,
    len: usize,
    max_states: u64,
    states: u64,
    exhausted_bound: bool,
    seen: HashSet<Visited>,
    /// The deepest partial order found (for diagnostics).
    best: Vec<usize>,
    path: Vec<usize>,
    /// Whether every value written or read is a small non-negative integer, so that the
    /// subset-sum pruning of [`Search::reads_reachable`] is exact.
    integral: bool,
}

impl<'a> Search<'a> {
    fn new(entries: &'a [Entry], len: usize, max_states: u64) -> Self {
        let mut by_deadline: Vec<usize> = (0..entries.len()).collect();
        by_deadline.sort_by_key(|&i| (entries[i].call, entries[i].ret));
        let small = |v: &f32| v.fract() == 0.0 && (0.0..65_536.0).contains(v);
        let integral = entries.iter().all(|e| match &e.effect {
            Effect::Add(v) | Effect::Set(v) | Effect::Read(v) => v.iter().all(small),
        });
        Self {
            integral,
            entries,
            by_deadline,
            len,
            max_states,
            states: 0,
            exhausted_bound: false,
            seen: HashSet::new(),
            best: Vec::new(),
            path: Vec::new(),
        }
    }

    fn run(&mut self) -> bool {
        let done = vec![0u64; self.entries.len().div_ceil(64)];
        let value = vec![0.0f32; self.len];
        self.visit(&done, &value)
    }

    fn visit(&mut self, done: &[u64], value: &[f32]) -> bool {
        let is_done = |i: usize| done[i / 64] & (1 << (i % 64)) != 0;
        // The earliest return among required entries not placed yet bounds what may go next.
        let mut min_ret = u64::MAX;
        let mut all_required = true;
        for (i, e) in self.entries.iter().enumerate() {
            if !e.optional && !is_done(i) {
                all_required = false;
                min_ret = min_ret.min(e.ret);
            }
        }
        if all_required {
            return true;
        }
        if self.path.len() > self.best.len() {
            self.best = self.path.clone();
        }
        if !self.reads_reachable(done, value) {
            return false;
        }
        // A read that may go next and matches the current value goes next, without branching:
        // it changes nothing, and nothing still unplaced has to precede it, so any order that
        // places it later stays valid with it moved here.
        let free_read = self.entries.iter().enumerate().position(|(i, e)| {
            !is_done(i)
                && e.call < min_ret
                && e.pred.is_none_or(&is_done)
                && matches!(&e.effect, Effect::Read(r) if r.as_slice() == value)
        });
        if let Some(i) = free_read {
            let mut next_done = done.to_vec();
            next_done[i / 64] |= 1 << (i % 64);
            self.states += 1;
            self.path.push(i);
            let found = self.visit(&next_done, value);
            self.path.pop();
            return found;
        }
        // Writes that may go next, with the value after each. Those that make some read that
        // may go next match are tried first, then the rest by earliest deadline.
        let pending_reads: Vec<&[f32]> = self
            .entries
            .iter()
            .enumerate()
            .filter(|&(i, e)| !is_done(i) && e.call < min_ret)
            .filter_map(|(_, e)| match &e.effect {
                Effect::Read(r) => Some(r.as_slice()),
                _ => None,
            })
            .collect();
        let mut options: Vec<(bool, usize, usize, Vec<f32>)> = Vec::new();
        for &i in &self.by_deadline {
            let e = &self.entries[i];
            if is_done(i) || e.call >= min_ret || e.pred.is_some_and(|p| !is_done(p)) {
                continue;
            }
            // Of identical optional writes not placed yet, only the one called first (then the
            // lowest index) may go next: an order that places a later-called twin here and
            // this one later (or never) stays valid with the two swapped, since this one may
            // go wherever its twin may (the bound `min_ret` only grows as entries are placed).
            if e.optional
                && self.entries.iter().enumerate().any(|(j, o)| {
                    j != i
                        && !is_done(j)
                        && o.optional
                        && (o.call, j) < (e.call, i)
                        && o.effect == e.effect
                })
            {
                continue;
            }
            let mut next = value.to_vec();
            match &e.effect {
                Effect::Add(u) => next.iter_mut().zip(u).for_each(|(v, u)| *v += u),
                Effect::Set(u) => next.copy_from_slice(u),
                // Reads that may go next but do not match cannot go next.
                Effect::Read(_) => continue,
            }
            let helps = pending_reads.contains(&next.as_slice());
            options.push((!helps, options.len(), i, next));
        }
        options.sort_by_key(|&(later, rank, _, _)| (later, rank));
        for (_, _, i, next) in options {
            let mut next_done = done.to_vec();
            next_done[i / 64] |= 1 << (i % 64);
            let bits: Box<[u32]> = next.iter().map(|v| v.to_bits()).collect();
            if !self
                .seen
                .insert((next_done.clone().into_boxed_slice(), bits))
            {
                continue;
            }
            self.states += 1;
            if self.max_states > 0 && self.states > self.max_states {
                self.exhausted_bound = true;
                return false;
            }
            self.path.push(i);
            if self.visit(&next_done, &next) {
                return true;
            }
            self.path.pop();
            if self.exhausted_bound {
                return false;
            }
        }
        false
    }
}

impl Search<'_> {
    /// A necessary condition for the state to lead anywhere: every read not placed yet can
    /// still be explained, component by component, from the current value (if no unplaced set
    /// must precede it) plus the unplaced pushes that must precede it plus some of those that
    /// may, or from an unplaced set that may precede it plus some unplaced pushes that may
    /// follow that set and precede the read. Exact subset sums over small integers (bitsets);
    /// always true for other values.
    fn reads_reachable(&self, done: &[u64], value: &[f32]) -> bool {
        if !self.integral {
            return true;
        }
        let is_done = |i: usize| done[i / 64] & (1 << (i % 64)) != 0;
        let open = |i: usize| !is_done(i);
        let mut items: Vec<&[f32]> = Vec::new();
        let mut target = vec![0.0f64; self.len];
        for (ri, r) in self.entries.iter().enumerate() {
            let Effect::Read(want) = &r.effect else {
                continue;
            };
            if is_done(ri) {
                continue;
            }
            // From the current value.
            let set_must_intervene = self.entries.iter().enumerate().any(|(i, e)| {
                open(i) && !e.optional && matches!(e.effect, Effect::Set(_)) && e.ret < r.call
            });
            let mut ok = false;
            if !set_must_intervene {
                items.clear();
                for c in 0..self.len {
                    target[c] = f64::from(want[c]) - f64::from(value[c]);
                }
                for (i, e) in self.entries.iter().enumerate() {
                    if let Effect::Add(u) = &e.effect
                        && open(i)
                        && e.call < r.ret
                    {
                        if !e.optional && e.ret < r.call {
                            target
                                .iter_mut()
                                .zip(u)
                                .for_each(|(t, u)| *t -= f64::from(*u));
                        } else {
                            items.push(u);
                        }
                    }
                }
                ok = vector_subset_hits(&target, &items);
            }
            // From an unplaced set.
            for (si, s) in self.entries.iter().enumerate() {
                if ok {
                    break;
                }
                let Effect::Set(base) = &s.effect else {
                    continue;
                };
                if !open(si) || s.call >= r.ret {
                    continue;
                }
                for c in 0..self.len {
                    target[c] = f64::from(want[c]) - f64::from(base[c]);
                }
                if target.iter().any(|&t| t < 0.0) {
                    continue;
                }
                items.clear();
                for (i, e) in self.entries.iter().enumerate() {
                    if let Effect::Add(u) = &e.effect
                        && open(i)
                        && e.call < r.ret
                        && e.ret > s.call
                    {
                        items.push(u);
                    }
                }
                ok = vector_subset_hits(&target, &items);
            }
            if !ok {
                return false;
            }
        }
        true
    }
}

fn describe(history: &History, entries: &[Entry], best: &[usize]) -> String {
    const MAX_LINES: usize = 80;
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&i| entries[i].call);
    let mut out = String::new();
    let line = |e: &Entry| match e.op {
        Some(op) => format!("{}", history.ops()[op]),
        None => format!("final value {:?} (a read after everything)", e.effect),
    };
    for &i in order.iter().take(MAX_LINES) {
        out += &format!("  {}\n", line(&entries[i]));
    }
    if order.len() > MAX_LINES {
        out += &format!("  ... and {} more ops\n", order.len() - MAX_LINES);
    }
    out += &format!(
        "  longest explainable prefix ({} of {} ops):",
        best.len(),
        entries.len()
    );
    for &i in best {
        out += &format!(
            " {}",
            entries[i].op.map_or("final".into(), |op| format!("#{op}"))
        );
    }
    out
}

// ----- final values ---------------------------------------------------------------------------

#[cfg(test)]
#[path = "linearizable_tests.rs"]
mod tests;
