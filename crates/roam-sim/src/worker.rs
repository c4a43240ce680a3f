//! Scripts and simulated workers.
//!
//! A simulated worker runs its script one [`Op`] at a time, like an application thread calling
//! the real client API: a synchronous op blocks the worker until it completes, an asynchronous op
//! is only issued, and [`Op::WaitAll`] blocks until every op the worker has outstanding is done.
//! Each worker has the same access front end as a real one (`roam_core::access`: validation,
//! fast path, hand-off to the node); running an op lives in [`crate::sim`], which owns the
//! nodes; this module holds the per-worker bookkeeping.
//!
//! Sampling (`roam_core::sampling`) runs like the real shell's `prepare_sample` / `pull_sample`
//! / `finish_sample`: [`Op::Sample`] does all three at once, and [`Op::PrepareSample`],
//! [`Op::PullSample`] and [`Op::FinishSample`] spread them over the script, so that other ops
//! (and time) pass between drawing and reading. A worker keeps at most one open sample handle.
//!
//! Invariant: a worker is either blocked (on one op or on all of them) or has a ready time; it
//! acts only through its own events, never re-entrantly from a completion.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use roam_core::{Front, Key, NodeId, ReqId, SampleHandle, Time, WorkerId};

/// A worker of the simulated cluster: its node and its index there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkerRef {
    /// The node the worker runs on.
    pub node: NodeId,
    /// Its index inside the node.
    pub worker: WorkerId,
}

impl WorkerRef {
    /// Worker `worker` of node `node`.
    pub fn new(node: u32, worker: u32) -> Self {
        Self {
            node: NodeId(node),
            worker: WorkerId(worker),
        }
    }
}

impl fmt::Display for WorkerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "worker {}.{}", self.node.0, self.worker.0)
    }
}

/// One step of a worker's script.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Read `keys`; with `wait`, block until the values are in.
    Pull {
        /// Keys to read (duplicates allowed).
        keys: Vec<Key>,
        /// Block until done (synchronous) or only issue (asynchronous).
        wait: bool,
    },
    /// Add `vals` to `keys`' values (`vals` holds the keys' values concatenated).
    Push {
        /// Keys to update.
        keys: Vec<Key>,
        /// The increments, concatenated in key order.
        vals: Vec<f32>,
        /// Block until acknowledged or only issue.
        wait: bool,
    },
    /// Overwrite `keys`' values with `vals`.
    Set {
        /// Keys to overwrite.
        keys: Vec<Key>,
        /// The new values, concatenated in key order.
        vals: Vec<f32>,
        /// Block until acknowledged or only issue.
        wait: bool,
    },
    /// Apply `grads` to `keys` with the key space's optimizer (`Front::push_gradients`).
    PushGradients {
        /// Keys to update.
        keys: Vec<Key>,
        /// The gradients, concatenated in key order.
        grads: Vec<f32>,
        /// Block until acknowledged or only issue.
        wait: bool,
    },
    /// Apply aggregates of gradients to `keys` (`Front::push_gradient_sums`): per key its
    /// gradient sum, then the sum of their squares.
    PushGradientSums {
        /// Keys to update.
        keys: Vec<Key>,
        /// The aggregates, concatenated in key order (twice each key's length).
        aggregates: Vec<f32>,
        /// Block until acknowledged or only issue.
        wait: bool,
    },
    /// Move ownership of `keys` to this worker's node (dynamic allocation). Like the real shell,
    /// the worker first checks the store: if allocation is static or every key is already local
    /// (or a replica) it completes at once without involving the node; otherwise it hands the
    /// keys that are not to `Node::issue_localize` (keys on their way are cheap there). Reads
    /// and writes nothing.
    Localize {
        /// Keys to move here.
        keys: Vec<Key>,
        /// Block until every key has landed, or only issue.
        wait: bool,
    },
    /// Move the home of `key`'s bucket to node `to` (`Node::issue_move_home`; the coordinator
    /// runs it). Reads and writes nothing.
    MoveHome {
        /// A key of the bucket to move.
        key: Key,
        /// The bucket's next home.
        to: u32,
        /// Block until the new home serves the bucket, or only issue.
        wait: bool,
    },
    /// The worker is done for good (`Node::retire_worker`, as when a real worker's handle is
    /// dropped): it counts as arrived at its node's later barriers, and its node may ask for
    /// its own drain. Must be the script's last op.
    Retire,
    /// Drain node `node` (`Node::issue_drain`; the coordinator runs it): its buckets and keys
    /// move to the other members, then it leaves and its node exits. Reads and writes nothing.
    Drain {
        /// The node to drain.
        node: u32,
        /// Block until it left, or only issue.
        wait: bool,
    },
    /// Wait for every worker of every node. Always blocking; it does not wait for this worker's
    /// asynchronous ops (put a [`Op::WaitAll`] before it for that).
    Barrier,
    /// `Node::issue_sync_replicas`: a collective of every worker of every node that completes
    /// once every push issued before it, on any node, is in every replica of its key. Always
    /// blocking; like [`Op::Barrier`] it does not wait for this worker's asynchronous ops. Fails
    /// with `PeerGone` once a peer is lost.
    SyncReplicas,
    /// `Node::issue_checkpoint_cut`: a collective of every worker of every node; when it
    /// completes at a node, the simulator takes that node's snapshot (its owned records and,
    /// as hub, its replicated keys' primaries: what the real shell writes, see
    /// [`crate::Sim::checkpoints`]). Like the shell, scripts follow it with [`Op::Barrier`] on
    /// every worker (nothing is pushed before every node has its snapshot; the barrier thaws
    /// the node), and precede it with [`Op::WaitAll`]. Fails with `PeerGone` once a peer is
    /// lost.
    Checkpoint,
    /// Block until every op this worker issued has completed.
    WaitAll,
    /// Pause for this many virtual nanoseconds.
    Sleep(u64),
    /// Draws `n` samples from sampler `sampler` (an index into `SimConfig::samplers`) and reads
    /// them, as the real shell's `prepare_sample`, `pull_sample` and `finish_sample` in a row.
    /// The prepare's localize hand-off (`preloc`, `pool`), if any, is issued and never waited
    /// for (recorded as an asynchronous [`Op::Localize`] of those keys); the samples are then
    /// pulled in two calls when `n ≥ 2` (the first half as an asynchronous pull, the rest as a
    /// pull that blocks with `wait`), each recorded as a pull of the keys drawn, with the values
    /// read, so the checkers judge sampled reads like any other. A refused call (see
    /// `roam_core::SampleError`) records nothing and is counted in [`SampleStats::refused`].
    /// A handle left open by [`Op::PrepareSample`] is finished first.
    Sample {
        /// The sampler's index.
        sampler: u32,
        /// Samples to draw.
        n: usize,
        /// Block until the last pull's values are in.
        wait: bool,
    },
    /// `prepare_sample` of `n` samples from `sampler`, kept open in the worker (an open handle
    /// is finished first). Its localize hand-off is issued as in [`Op::Sample`]; nothing is read.
    PrepareSample {
        /// The sampler's index.
        sampler: u32,
        /// Samples the handle will hand out.
        n: usize,
    },
    /// `pull_sample` of `n` samples of the open handle, recorded as a pull of the keys drawn.
    /// Panics (a script error) if no handle is open.
    PullSample {
        /// Samples to draw now.
        n: usize,
        /// Block until the values are in, or only issue.
        wait: bool,
    },
    /// `finish_sample` of the open handle (samples never pulled count in
    /// [`SampleStats::unpulled`]). Panics (a script error) if no handle is open.
    FinishSample,
    /// `intent(keys, start, end)` through the worker's front end. Keys due now are handed to
    /// the node as the real shell does (never waited for; recorded as an asynchronous
    /// [`Op::Localize`] of those keys). Panics (a script error) on an invalid intent.
    Intent {
        /// Keys the worker will access.
        keys: Vec<Key>,
        /// First clock of the access.
        start: u64,
        /// The clock after the last.
        end: u64,
    },
    /// `advance_clock` at the current virtual time; the keys of intents due now are handed to
    /// the node as for [`Op::Intent`].
    AdvanceClock,
}

impl Op {
    /// A synchronous pull.
    pub fn pull(keys: impl Into<Vec<Key>>) -> Self {
        Self::Pull {
            keys: keys.into(),
            wait: true,
        }
    }

    /// An asynchronous pull.
    pub fn pull_async(keys: impl Into<Vec<Key>>) -> Self {
        Self::Pull {
            keys: keys.into(),
            wait: false,
        }
    }

    /// A synchronous push (add).
    pub fn push(keys: impl Into<Vec<Key>>, vals: impl Into<Vec<f32>>) -> Self {
        Self::Push {
            keys: keys.into(),
            vals: vals.into(),
            wait: true,
        }
    }

    /// An asynchronous push (add).
    pub fn push_async(keys: impl Into<Vec<Key>>, vals: impl Into<Vec<f32>>) -> Self {
        Self::Push {
            keys: keys.into(),
            vals: vals.into(),
            wait: false,
        }
    }

    /// A synchronous localize.
    pub fn localize(keys: impl Into<Vec<Key>>) -> Self {
        Self::Localize {
            keys: keys.into(),
            wait: true,
        }
    }

    /// A synchronous home move of `key`'s bucket to node `to`.
    pub fn move_home(key: Key, to: u32) -> Self {
        Self::MoveHome {
            key,
            to,
            wait: true,
        }
    }

    /// A synchronous drain of node `node`.
    pub fn drain(node: u32) -> Self {
        Self::Drain { node, wait: true }
    }

    /// An asynchronous localize.
    pub fn localize_async(keys: impl Into<Vec<Key>>) -> Self {
        Self::Localize {
            keys: keys.into(),
            wait: false,
        }
    }

    /// A synchronous sampling of `n` samples from sampler `sampler` ([`Op::Sample`]).
    pub fn sample(sampler: u32, n: usize) -> Self {
        Self::Sample {
            sampler,
            n,
            wait: true,
        }
    }

    /// An intent to access `keys` at clock `start` only.
    pub fn intent(keys: impl Into<Vec<Key>>, start: u64) -> Self {
        Self::Intent {
            keys: keys.into(),
            start,
            end: start + 1,
        }
    }

    /// A synchronous set (overwrite).
    pub fn set(keys: impl Into<Vec<Key>>, vals: impl Into<Vec<f32>>) -> Self {
        Self::Set {
            keys: keys.into(),
            vals: vals.into(),
            wait: true,
        }
    }

    /// An asynchronous set (overwrite).
    pub fn set_async(keys: impl Into<Vec<Key>>, vals: impl Into<Vec<f32>>) -> Self {
        Self::Set {
            keys: keys.into(),
            vals: vals.into(),
            wait: false,
        }
    }
}

/// What a blocked worker waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// The op with this history index.
    On(usize),
    /// Every outstanding op.
    All,
}

/// An op handed to the node and not completed yet.
#[derive(Debug)]
pub(crate) struct Outstanding {
    /// Index of its record in the history.
    pub(crate) record: usize,
    /// For pulls: the output buffer, already holding the locally served keys.
    pub(crate) out: Vec<f32>,
}

/// What one worker's sampling ops did with one sampler (the simulator's view; the front end's
/// own counters, per worker, are [`crate::Sim::worker_counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleStats {
    /// `pull_sample` calls that were not refused.
    pub pulls: u64,
    /// Samples drawn by them.
    pub samples: u64,
    /// Samples whose key the front end handed to the node to read (by a message, even to this
    /// node without fast local access); the others were read from the store in the call.
    pub remote_samples: u64,
    /// Keys of the localize hand-offs of `prepare_sample` (repeats kept).
    pub localized_keys: u64,
    /// Calls refused by the front end (`roam_core::SampleError`).
    pub refused: u64,
    /// Samples prepared and never pulled (handles finished early).
    pub unpulled: u64,
}

/// State of one simulated worker.
#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) id: WorkerRef,
    pub(crate) script: VecDeque<Op>,
    pub(crate) blocked: Option<Blocked>,
    /// When the worker may run its next op (meaningful while not blocked).
    pub(crate) ready_at: Time,
    /// Ops handed to the node, by the node's request id.
    pub(crate) outstanding: BTreeMap<ReqId, Outstanding>,
    /// Number of ops recorded so far (program order index of the next one).
    pub(crate) issued: usize,
    /// The access front end on the node's store, as the real shell's workers have.
    pub(crate) front: Front,
    /// The open sample handle of [`Op::PrepareSample`].
    pub(crate) sample: Option<SampleHandle>,
    /// What its sampling ops did, per sampler index asked for.
    pub(crate) sample_stats: BTreeMap<u32, SampleStats>,
}

impl Worker {
    pub(crate) fn new(id: WorkerRef, front: Front) -> Self {
        Self {
            front,
            id,
            script: VecDeque::new(),
            blocked: None,
            ready_at: Time(0),
            outstanding: BTreeMap::new(),
            issued: 0,
            sample: None,
            sample_stats: BTreeMap::new(),
        }
    }

    /// When the worker has something to do and may do it.
    pub(crate) fn next_event(&self) -> Option<Time> {
        (self.blocked.is_none() && !self.script.is_empty()).then_some(self.ready_at)
    }

    /// Whether the worker has finished its script and has nothing outstanding.
    pub(crate) fn is_done(&self) -> bool {
        self.script.is_empty() && self.blocked.is_none() && self.outstanding.is_empty()
    }
}
