//! Consistency checkers for histories of the simulator.
//!
//! - [`check_linearizable`]: a complete per-key linearizability checker (a search for one total
//!   order per key, in the style of Wing & Gong with Lowe's memoisation, as in Porcupine and
//!   Knossos). Every successful pull, push and set on a key, sync or async, must take effect at
//!   one instant between its invocation and its return, in one order per key that explains
//!   every value read. With [`Consistency::program_order`] the order must also respect each
//!   worker's program order on the key, async ops included (the per-worker FIFO, "PRAM",
//!   guarantee). Since a synchronous op returns before its worker issues the next one, passing
//!   this check implies that the synchronous ops are sequentially consistent.
//! - [`final_sums`]: independent accounting of the final value of every key: its last set plus
//!   exactly the pushes after it, with only pushes that failed because a peer was lost allowed
//!   to be missing.
//! - [`check_per_key_linearizable`]: the original read-by-read check (a necessary condition for
//!   linearizability, cheap, used by the static-allocation tests).
//!
//! Real-time order uses [`crate::Stamp::seq`]: op `a` certainly precedes `b` iff `a` returned
//! before `b` was invoked. Failed or pending writes may have taken effect at any time after their
//! invocation, or never (see [`crate::history`]), so the search may place them anywhere after
//! their invocation or leave them out.
//!
//! # The read-by-read check
//!
//! Each key is treated as a register of `f32` values supporting add (push), overwrite (set) and
//! read (pull), starting at zero. For every successful read it checks that *some* placement of
//! the writes in their real-time windows explains the value: a last overwrite `s` (or the initial
//! zero) that may precede the read and is not certainly overwritten again before it, plus the adds
//! that certainly lie between `s` and the read, plus some subset of the adds that may.
//!
//! This is a necessary condition for per-key linearizability, checked read by read (it does not
//! search for one linearization serving all reads at once), so it never reports a false violation
//! and catches stale reads, lost updates and values from nowhere. Each value component is checked
//! separately. Subset sums are exact when the values are integers below 2^24 (tests should write
//! such values, for which `f32` addition is exact and commutative); otherwise only the bounds
//! are checked.

use std::collections::HashSet;
use std::fmt;

use roam_core::Key;

use roam_core::OpError;

use crate::history::{History, OpKind, OpRecord, Outcome};

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
    let mut writes: Vec<Vec<Write>> = vec![Vec::new(); space.num_keys() as usize];
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
        for (key, vals) in read.reads(space) {
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
fn subset_sum_reaches(values: &[f64], target: f64) -> bool {
    const EXACT: f64 = (1u64 << 24) as f64;
    let integral = |x: f64| x.fract() == 0.0 && x.abs() < EXACT;
    if integral(target) && values.iter().all(|&v| integral(v)) {
        let mut sums: HashSet<i64> = HashSet::from([0]);
        for &v in values {
            let v = v as i64;
            let next: Vec<i64> = sums.iter().map(|s| s + v).collect();
            sums.extend(next);
            if sums.len() > 1 << 16 {
                return within_bounds(values, target);
            }
        }
        return sums.contains(&(target as i64));
    }
    within_bounds(values, target)
}

fn within_bounds(values: &[f64], target: f64) -> bool {
    let lo: f64 = values.iter().filter(|v| **v < 0.0).sum();
    let hi: f64 = values.iter().filter(|v| **v > 0.0).sum();
    let slack = 1e-3 * (1.0 + lo.abs() + hi.abs() + target.abs());
    target >= lo - slack && target <= hi + slack
}

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
    let num_keys = space.num_keys() as usize;
    let mut per_key: Vec<Vec<Entry>> = vec![Vec::new(); num_keys];
    let mut last_seq = 0;
    for op in history.ops() {
        last_seq = last_seq.max(op.invoke.seq).max(op.ret.map_or(0, |r| r.seq));
        let (call, ret) = (op.invoke.seq, op.ret.map_or(u64::MAX, |r| r.seq));
        match op.kind {
            OpKind::Push | OpKind::Set => {
                let optional = !op.succeeded();
                for (key, vals) in op.writes(space) {
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
            OpKind::Pull => {
                for (key, vals) in op.reads(space) {
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
            OpKind::Barrier | OpKind::Localize | OpKind::MoveHome => {}
        }
    }
    if let Some(finals) = finals {
        for (key, value) in finals.iter().enumerate().take(num_keys) {
            if let Some(value) = value {
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
        let mut options: Vec<(bool, usize, Vec<f32>)> = Vec::new();
        for &i in &self.by_deadline {
            let e = &self.entries[i];
            if is_done(i) || e.call >= min_ret || e.pred.is_some_and(|p| !is_done(p)) {
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
            options.push((!helps, options.len(), next));
        }
        options.sort_by_key(|&(later, rank, _)| (later, rank));
        for (_, rank, next) in options {
            let i = self
                .by_deadline
                .iter()
                .copied()
                .filter(|&i| {
                    let e = &self.entries[i];
                    !is_done(i)
                        && e.call < min_ret
                        && e.pred.is_none_or(&is_done)
                        && !matches!(e.effect, Effect::Read(_))
                })
                .nth(rank)
                .expect("ranked above");
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

/// Whether some subset of `items` (vectors of small non-negative integers) may sum to `target`:
/// exactly, by a dynamic program over the grid of partial sums bounded by the target (items are
/// non-negative, so no partial sum above it matters); rows index all components but the last,
/// each row a bitset of the last. For targets too large for that it checks each component
/// separately, which can only say yes too often. Sound for pruning either way: it never says no
/// when the answer is yes.
fn vector_subset_hits(target: &[f64], items: &[&[f32]]) -> bool {
    if target.iter().any(|&t| t < 0.0 || t.fract() != 0.0) {
        return false;
    }
    let dims = target.len();
    let t: Vec<usize> = target.iter().map(|&x| x as usize).collect();
    let rows: usize = t[..dims - 1].iter().map(|&x| x + 1).product();
    if dims == 1 || t[dims - 1] >= 64 || rows > 1 << 12 {
        return (0..dims).all(|c| {
            let column: Vec<f32> = items.iter().map(|v| v[c]).collect();
            subset_sum_hits(target[c], &column)
        });
    }
    let last = dims - 1;
    let mask = if t[last] == 63 {
        u64::MAX
    } else {
        (1u64 << (t[last] + 1)) - 1
    };
    let mut grid = vec![0u64; rows];
    grid[0] = 1;
    let mut coords = vec![0usize; last];
    for item in items {
        if item.iter().zip(&t).any(|(&v, &tc)| v as usize > tc) {
            continue;
        }
        let shift = item[last] as usize;
        // Rows from the highest down, so that each item is used at most once.
        for r in (0..rows).rev() {
            if grid[r] == 0 {
                continue;
            }
            // Destination row: add the item's leading components, if they stay within bounds.
            let mut rest = r;
            for (c, coord) in coords.iter_mut().enumerate() {
                *coord = rest % (t[c] + 1);
                rest /= t[c] + 1;
            }
            let mut dest = 0;
            let mut stride = 1;
            let mut fits = true;
            for c in 0..last {
                let x = coords[c] + item[c] as usize;
                if x > t[c] {
                    fits = false;
                    break;
                }
                dest += x * stride;
                stride *= t[c] + 1;
            }
            if fits {
                grid[dest] |= (grid[r] << shift) & mask;
            }
        }
    }
    grid[rows - 1] & (1 << t[last]) != 0
}

/// Whether some subset of `items` (small non-negative integers) sums to `target`.
fn subset_sum_hits(target: f64, items: &[f32]) -> bool {
    if target < 0.0 || target.fract() != 0.0 {
        return false;
    }
    let shifts: Vec<u64> = items.iter().map(|&v| v as u64).collect();
    bitset_subset_hits(target as u64, &shifts)
}

fn bitset_subset_hits(target: u64, items: &[u64]) -> bool {
    let total: u64 = items.iter().sum();
    if target > total {
        return false;
    }
    let target = target as usize;
    let words = target / 64 + 1;
    let mut bits = vec![0u64; words];
    bits[0] = 1;
    for &item in items {
        let shift = item as usize;
        if shift == 0 || shift > target {
            continue;
        }
        let (w, b) = (shift / 64, shift % 64);
        for i in (w..words).rev() {
            let mut moved = bits[i - w] << b;
            if b > 0 && i > w {
                moved |= bits[i - w - 1] >> (64 - b);
            }
            bits[i] |= moved;
        }
        if bits[target / 64] & (1 << (target % 64)) != 0 {
            return true;
        }
    }
    bits[target / 64] & (1 << (target % 64)) != 0
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
    let space = history.space();
    (0..space.num_keys())
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

#[cfg(test)]
mod linearizable_tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use roam_core::{KeySpace, NodeId, OpError, Time};

    use super::*;
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
}
