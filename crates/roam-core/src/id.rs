//! Identifiers shared by every layer: nodes, workers and requests.
//!
//! They are plain newtypes so that a node rank can never be confused with a worker index or a
//! request number in a signature.

use std::fmt;

/// A key of the parameter space: an index in the dense range `[0, num_keys)`.
pub type Key = u64;

/// The rank of a node (one OS process) in the cluster, `0..num_nodes`. Node 0 is the coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The rank as an index into per-node tables.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}

/// A worker thread's index inside its node, `0..workers_per_node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkerId(pub u32);

impl WorkerId {
    /// The index into per-worker tables.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Identifies one operation issued on a node. Unique per issuing node for the node's lifetime;
/// replies carry it back so the issuing node can find the waiting worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReqId(pub u64);
