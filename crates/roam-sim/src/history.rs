//! The history of a run: every operation's worker, program position, invocation and return
//! stamps, inputs and outcome, plus the faults that were injected or observed.
//!
//! It is the input of consistency checkers, so it records what a client could observe and no
//! more: nothing about which node served a key (that will change once keys relocate), only
//! per-worker program order, real-time order ([`Stamp`]s) and values.
//!
//! Invariants:
//! - `ops[i].id == i`; records are appended at invocation, in invocation order.
//! - `invoke <= ret` in stamp order; `ret` is `None` exactly while the outcome is
//!   [`Outcome::Pending`] (the op never completed, e.g. its worker's node crashed).
//! - Within one worker, `program_index` counts 0, 1, 2, … in invocation order.
//! - A failed write ([`Outcome::Failed`]) may have been applied in part (for instance to local
//!   keys, or at nodes that answered before another was lost); checkers must treat it as "may
//!   have taken effect, at any time after its invocation".
//! - Replicated keys ([`History::is_replicated`]) are recorded like any other but checked by
//!   no checker: they are only eventually consistent.

use std::collections::BTreeSet;
use std::fmt;

use roam_core::{Key, KeySpace, NodeId, OpError, Time};

use crate::worker::WorkerRef;

/// A point in the run: virtual time plus a global sequence number that totally orders the
/// events of the run consistently with time (several events can share a virtual time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp {
    /// Virtual time.
    pub time: Time,
    /// Position of the event in the run.
    pub seq: u64,
}

/// What an operation was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// A read.
    Pull,
    /// An add.
    Push,
    /// An overwrite.
    Set,
    /// Gradients for the key space's optimizer (`push_gradients`): a write whose effect the
    /// linearizability and final-sum checkers do not model (optimizer tests check final
    /// values against a sequential application themselves).
    Gradient,
    /// A global barrier.
    Barrier,
    /// A relocation request (reads and writes nothing).
    Localize,
    /// A home move (reads and writes nothing).
    MoveHome,
    /// A `sync_replicas` collective (reads and writes nothing).
    SyncReplicas,
    /// A drain of a node (reads and writes nothing).
    Drain,
    /// A checkpoint cut (reads and writes nothing; the node's holdings are snapshot when it
    /// completes there: [`crate::Sim::checkpoints`]).
    Checkpoint,
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Not completed (yet, or ever: its node crashed).
    Pending,
    /// A push, set, barrier or replica sync succeeded.
    Done,
    /// A pull succeeded with these values (the keys' values concatenated in key order).
    Pulled(Vec<f32>),
    /// The op failed.
    Failed(OpError),
}

/// One operation of one worker.
#[derive(Clone, Debug, PartialEq)]
pub struct OpRecord {
    /// Index in [`History::ops`].
    pub id: usize,
    /// Who issued it.
    pub worker: WorkerRef,
    /// Its position among the ops of its worker (program order).
    pub program_index: usize,
    /// What it was.
    pub kind: OpKind,
    /// Its keys (empty for barriers and replica syncs).
    pub keys: Vec<Key>,
    /// For pushes and sets, the values written, concatenated in key order; else empty.
    pub input: Vec<f32>,
    /// Whether the worker waited for it.
    pub sync: bool,
    /// When it was issued.
    pub invoke: Stamp,
    /// When its completion reached the worker; `None` while pending.
    pub ret: Option<Stamp>,
    /// How it ended.
    pub outcome: Outcome,
}

impl OpRecord {
    /// Whether it completed successfully.
    pub fn succeeded(&self) -> bool {
        matches!(self.outcome, Outcome::Done | Outcome::Pulled(_))
    }

    /// The error, if it failed.
    pub fn error(&self) -> Option<&OpError> {
        match &self.outcome {
            Outcome::Failed(err) => Some(err),
            _ => None,
        }
    }

    /// For pushes and sets: each key with the values written to it.
    pub fn writes<'a>(
        &'a self,
        space: &'a KeySpace,
    ) -> impl Iterator<Item = (Key, &'a [f32])> + 'a {
        let input: &[f32] = match self.kind {
            OpKind::Push | OpKind::Set | OpKind::Gradient => &self.input,
            OpKind::Pull
            | OpKind::Barrier
            | OpKind::Localize
            | OpKind::MoveHome
            | OpKind::SyncReplicas
            | OpKind::Checkpoint
            | OpKind::Drain => &[],
        };
        split_per_key(&self.keys, input, space)
    }

    /// For successful pulls: each key with the values read. Empty otherwise.
    pub fn reads<'a>(&'a self, space: &'a KeySpace) -> impl Iterator<Item = (Key, &'a [f32])> + 'a {
        let values: &[f32] = match &self.outcome {
            Outcome::Pulled(values) => values,
            _ => &[],
        };
        split_per_key(&self.keys, values, space)
    }
}

/// Cuts a concatenation of values into per-key slices; yields nothing if `values` is empty or
/// does not match the keys (e.g. an op refused for out-of-range keys).
fn split_per_key<'a>(
    keys: &'a [Key],
    values: &'a [f32],
    space: &'a KeySpace,
) -> impl Iterator<Item = (Key, &'a [f32])> + 'a {
    let matches = !values.is_empty() && space.check_batch(keys, values.len()).is_ok();
    let keys = if matches { keys } else { &[] };
    keys.iter().scan(0usize, move |pos, &key| {
        let len = space.len(key);
        let slice = &values[*pos..*pos + len];
        *pos += len;
        Some((key, slice))
    })
}

/// A fault injected by the test or observed by a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The node stopped (by [`crate::Sim::crash`]).
    Crash(NodeId),
    /// The connection between two nodes broke (explicitly, by a lossy send, or after a protocol
    /// violation).
    LinkBroken(NodeId, NodeId),
    /// The links between two nodes were held.
    Partition(NodeId, NodeId),
    /// The links between two nodes were released.
    Heal(NodeId, NodeId),
    /// `at` received bytes from `from` that do not decode as exactly one frame.
    ProtocolViolation {
        /// The receiver.
        at: NodeId,
        /// The sender.
        from: NodeId,
        /// What the decoder said.
        reason: String,
    },
    /// Node `at` started treating `peer` as lost: its connection to `peer` ended
    /// (`handle_peer_lost` was called, `via` is `None`), or a `Kind::PeerLost` notice from
    /// node `via` told it (every node that loses a peer tells all others, so a loss seen by any
    /// node becomes a loss everywhere).
    PeerLost {
        /// The node told.
        at: NodeId,
        /// The peer reported lost.
        peer: NodeId,
        /// The node whose notice told it, or `None` for the end of its own connection.
        via: Option<NodeId>,
    },
}

/// A fault and when it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRecord {
    /// When.
    pub at: Stamp,
    /// What.
    pub fault: Fault,
}

/// Everything the workers did, in invocation order. See the module docs for the invariants.
#[derive(Clone, Debug)]
pub struct History {
    space: KeySpace,
    /// Keys replicated on every node: only eventually consistent, so no checker covers them.
    replicated: BTreeSet<Key>,
    ops: Vec<OpRecord>,
    faults: Vec<FaultRecord>,
}

impl History {
    pub(crate) fn new(space: KeySpace) -> Self {
        Self {
            space,
            replicated: BTreeSet::new(),
            ops: Vec::new(),
            faults: Vec::new(),
        }
    }

    /// Marks `keys` as replicated (excluded from [`History::keys_checked`] and the checkers).
    pub(crate) fn with_replicated(mut self, keys: impl IntoIterator<Item = Key>) -> Self {
        self.replicated.extend(keys);
        self
    }

    /// Whether `key` is replicated on every node. Replicated keys are only eventually
    /// consistent (a push is local and reaches the other replicas in the background), so the
    /// checkers skip them: tests check their values after a `sync_replicas` instead.
    pub fn is_replicated(&self, key: Key) -> bool {
        self.replicated.contains(&key)
    }

    /// The replicated keys, sorted.
    pub fn replicated_keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.replicated.iter().copied()
    }

    /// The key space the ops refer to.
    pub fn space(&self) -> &KeySpace {
        &self.space
    }

    /// The keys the checks cover: every key of a dense space; the keys ops named in a sparse
    /// one (other keys were never created); replicated keys excepted in both.
    pub fn keys_checked(&self) -> Vec<Key> {
        if !self.space.is_sparse() {
            return (0..self.space.num_keys())
                .filter(|&k| !self.is_replicated(k))
                .collect();
        }
        let named: BTreeSet<Key> = self
            .ops
            .iter()
            .flat_map(|op| op.keys.iter().copied())
            .filter(|&k| !self.is_replicated(k))
            .collect();
        named.into_iter().collect()
    }

    /// One past the largest key the checkers look at: the key count of a dense space; for a
    /// sparse space (whose simulated workloads use small keys) one past the largest key any op
    /// names. Panics if a sparse run used a key too large to index per-key tables by. (Checkers
    /// index per-key tables by it and skip the replicated keys below it.)
    pub fn key_bound(&self) -> u64 {
        if !self.space.is_sparse() {
            return self.space.num_keys();
        }
        let bound = self
            .ops
            .iter()
            .flat_map(|op| op.keys.iter().copied())
            .max()
            .map_or(0, |k| k + 1);
        assert!(
            bound <= 1 << 20,
            "sparse simulations index checks by key: use keys below 2^20, not {}",
            bound - 1
        );
        bound
    }

    /// Every op, in invocation order (`ops()[i].id == i`).
    pub fn ops(&self) -> &[OpRecord] {
        &self.ops
    }

    /// Every fault, in order.
    pub fn faults(&self) -> &[FaultRecord] {
        &self.faults
    }

    /// The ops of one worker, in program order.
    pub fn of_worker(&self, worker: WorkerRef) -> impl Iterator<Item = &OpRecord> + '_ {
        self.ops.iter().filter(move |op| op.worker == worker)
    }

    /// When node `at` was first told that `peer` is lost, if it was.
    pub fn peer_lost_at(&self, at: NodeId, peer: NodeId) -> Option<Stamp> {
        self.faults.iter().find_map(|f| match f.fault {
            Fault::PeerLost { at: a, peer: p, .. } if a == at && p == peer => Some(f.at),
            _ => None,
        })
    }

    pub(crate) fn invoke(&mut self, mut record: OpRecord) -> usize {
        record.id = self.ops.len();
        self.ops.push(record);
        self.ops.len() - 1
    }

    pub(crate) fn complete(&mut self, id: usize, at: Stamp, outcome: Outcome) {
        let op = &mut self.ops[id];
        debug_assert!(op.ret.is_none(), "op {id} completed twice");
        op.ret = Some(at);
        op.outcome = outcome;
    }

    pub(crate) fn fault(&mut self, at: Stamp, fault: Fault) {
        self.faults.push(FaultRecord { at, fault });
    }
}

impl fmt::Display for OpRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ret = match self.ret {
            Some(r) => format!("{}@{}", r.time.0, r.seq),
            None => "-".into(),
        };
        write!(
            f,
            "#{} {} [{}] {:?}{} keys={:?} in={:?} invoke={}@{} ret={} -> {:?}",
            self.id,
            self.worker,
            self.program_index,
            self.kind,
            if self.sync { "" } else { " (async)" },
            self.keys,
            self.input,
            self.invoke.time.0,
            self.invoke.seq,
            ret,
            self.outcome
        )
    }
}
