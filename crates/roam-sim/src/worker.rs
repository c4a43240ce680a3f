//! Scripts and simulated workers.
//!
//! A simulated worker runs its script one [`Op`] at a time, like an application thread calling
//! the real client API: a synchronous op blocks the worker until it completes, an asynchronous op
//! is only issued, and [`Op::WaitAll`] blocks until every op the worker has outstanding is done.
//! Each worker has the same access front end as a real one (`roam_core::access`: validation,
//! fast path, hand-off to the node); running an op lives in [`crate::sim`], which owns the
//! nodes; this module holds the per-worker bookkeeping.
//!
//! Invariant: a worker is either blocked (on one op or on all of them) or has a ready time; it
//! acts only through its own events, never re-entrantly from a completion.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use roam_core::{Front, Key, NodeId, ReqId, Time, WorkerId};

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
    /// Wait for every worker of every node. Always blocking; it does not wait for this worker's
    /// asynchronous ops (put a [`Op::WaitAll`] before it for that).
    Barrier,
    /// `Node::issue_sync_replicas`: a collective of every worker of every node that completes
    /// once every push issued before it, on any node, is in every replica of its key. Always
    /// blocking; like [`Op::Barrier`] it does not wait for this worker's asynchronous ops. Fails
    /// with `PeerGone` once a peer is lost.
    SyncReplicas,
    /// Block until every op this worker issued has completed.
    WaitAll,
    /// Pause for this many virtual nanoseconds.
    Sleep(u64),
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

    /// An asynchronous localize.
    pub fn localize_async(keys: impl Into<Vec<Key>>) -> Self {
        Self::Localize {
            keys: keys.into(),
            wait: false,
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
