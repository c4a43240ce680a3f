//! Typed diagnostics: what a node noticed that is not an error of any one operation.
//!
//! Each variant names the peer, key, request or bucket involved, so a shell can log it, count it
//! or, in the simulator, assert on it. Every warning but [`Warning::UnknownSender`] is an
//! *anomaly*: a peer or this node broke the protocol, which correct nodes never do (the
//! simulator's tests require none).

use std::fmt;

use crate::id::{Key, NodeId, ReqId, WorkerId};
use crate::msg::MsgError;
use crate::wire::{Kind, RejectCode};

/// A diagnostic from the node state machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warning {
    /// A frame from a node that is not a member of the cluster.
    UnknownSender {
        /// The sender.
        from: NodeId,
    },
    /// A frame that does not decode as the message its kind names.
    Malformed {
        /// The sender.
        from: NodeId,
        /// Why.
        error: MsgError,
    },
    /// An answer for an operation that is not pending here.
    UnknownRequest {
        /// The sender.
        from: NodeId,
        /// The answer's kind.
        kind: Kind,
        /// The operation it names.
        req: ReqId,
    },
    /// An answer that does not fit its operation (kind, positions, keys or value lengths).
    BadAnswer {
        /// The sender.
        from: NodeId,
        /// The operation.
        req: ReqId,
        /// What is wrong.
        what: &'static str,
    },
    /// A request key that this node could not route to its owner.
    Unroutable {
        /// The key.
        key: Key,
        /// The requester.
        origin: NodeId,
        /// Why.
        code: RejectCode,
    },
    /// A membership message (join, leave, drain) that contradicts this node's state.
    Membership {
        /// The sender.
        from: NodeId,
        /// The node that joins or leaves.
        node: NodeId,
        /// What is wrong.
        what: &'static str,
    },
    /// A relocation message that contradicts this node's state.
    Relocation {
        /// The sender (`None`: this node's own request).
        from: Option<NodeId>,
        /// The key.
        key: Key,
        /// What is wrong.
        what: &'static str,
    },
    /// A replica-sync message that contradicts this node's state.
    Replica {
        /// The sender.
        from: NodeId,
        /// The key (or generation) it names.
        key: Key,
        /// What is wrong.
        what: &'static str,
    },
    /// A barrier message that contradicts this node's state.
    Barrier {
        /// The sender.
        from: NodeId,
        /// The generation it names.
        generation: u64,
        /// What is wrong.
        what: &'static str,
    },
    /// A home-move message that contradicts this node's state.
    HomeMove {
        /// The sender.
        from: NodeId,
        /// The bucket.
        bucket: u32,
        /// What is wrong.
        what: &'static str,
    },
    /// A load report that does not describe members' response times.
    LoadReport {
        /// The sender.
        from: NodeId,
        /// What is wrong.
        what: &'static str,
    },
    /// A worker retired twice, or one that does not exist.
    Worker {
        /// The worker.
        worker: WorkerId,
    },
    /// A barrier this node's workers wait in has waited `waited_ns` (a multiple of the
    /// configured interval), not an anomaly: a worker may be slow, stuck, or finished without
    /// being retired.
    BarrierWait {
        /// The barrier's generation.
        generation: u64,
        /// How long the first of this node's workers has waited in it (ns).
        waited_ns: u64,
        /// This node's workers that have not arrived (and are not retired), ascending.
        workers: Vec<(NodeId, WorkerId)>,
        /// At the coordinator, once this node has arrived: the members that have not, whose
        /// missing workers they name themselves (a member none of whose workers arrived is
        /// named only here). Ascending.
        nodes: Vec<NodeId>,
    },
    /// The node's spill (`spill.rs`) could not keep or give back `key`'s record: an I/O
    /// failure or a damaged file, named in `error` (file and offset). Not an anomaly.
    Spill {
        /// The key.
        key: Key,
        /// The spill's error.
        error: String,
    },
}

impl Warning {
    /// Whether this warning means a protocol violation (see the module docs).
    pub fn is_anomaly(&self) -> bool {
        !matches!(
            self,
            Self::UnknownSender { .. } | Self::BarrierWait { .. } | Self::Spill { .. }
        )
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownSender { from } => write!(f, "frame from {from}, which is no member"),
            Self::Malformed { from, error } => write!(f, "malformed frame from {from}: {error}"),
            Self::UnknownRequest { from, kind, req } => {
                write!(f, "{kind:?} from {from} for unknown request {}", req.0)
            }
            Self::BadAnswer { from, req, what } => {
                write!(f, "answer from {from} for request {}: {what}", req.0)
            }
            Self::Unroutable { key, origin, code } => {
                write!(
                    f,
                    "cannot route key {key} of a request from {origin} ({code:?})"
                )
            }
            Self::Membership { from, node, what } => {
                write!(f, "membership message about {node} from {from}: {what}")
            }
            Self::Relocation { from, key, what } => match from {
                Some(from) => write!(f, "relocation of key {key} (from {from}): {what}"),
                None => write!(f, "relocation of key {key}: {what}"),
            },
            Self::Replica { from, key, what } => {
                write!(
                    f,
                    "replica sync message about key {key} from {from}: {what}"
                )
            }
            Self::Barrier {
                from,
                generation,
                what,
            } => write!(f, "barrier {generation} message from {from}: {what}"),
            Self::HomeMove { from, bucket, what } => {
                write!(f, "home move of bucket {bucket} (from {from}): {what}")
            }
            Self::LoadReport { from, what } => write!(f, "load report from {from}: {what}"),
            Self::Worker { worker } => write!(f, "{worker:?} retired twice or unknown"),
            Self::BarrierWait {
                generation,
                waited_ns,
                workers,
                nodes,
            } => {
                write!(
                    f,
                    "barrier {generation} has waited {:?}; still waiting for",
                    std::time::Duration::from_nanos(*waited_ns)
                )?;
                let mut sep = " ";
                for (node, worker) in workers {
                    write!(f, "{sep}worker {} of {node}", worker.0)?;
                    sep = ", ";
                }
                for node in nodes {
                    write!(f, "{sep}{node} (no arrival yet)")?;
                    sep = ", ";
                }
                Ok(())
            }
            Self::Spill { key, error } => write!(f, "spill of key {key}: {error}"),
        }
    }
}
