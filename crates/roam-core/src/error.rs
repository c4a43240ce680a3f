//! Error types, one small enum per kind of operation.
//!
//! Every variant names what was wrong (which key, which length, which peer) so that a user can
//! act on the message alone.

use crate::id::{Key, NodeId};

/// Bad input to an access (pull, push, set): nothing was changed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum AccessError {
    /// The key is not in `[0, num_keys)`.
    #[error("key {key} is out of range: the key space holds keys 0..{num_keys}")]
    KeyOutOfRange {
        /// The offending key.
        key: Key,
        /// Size of the key space.
        num_keys: u64,
    },
    /// The value buffer does not hold exactly the keys' values.
    #[error("buffer holds {actual} values but the {keys} keys have {expected} values in total")]
    LengthMismatch {
        /// Number of keys in the batch.
        keys: usize,
        /// Sum of the keys' value lengths.
        expected: usize,
        /// Length of the buffer given.
        actual: usize,
    },
    /// `push_gradients` on a key space without an optimizer.
    #[error("push_gradients needs an optimizer, and none is configured for this key space")]
    NoOptimizer,
    /// `push_gradient_sums` with a sum of squares that no gradients have (negative or not
    /// finite): per key the sums come first, then the squares.
    #[error(
        "the gradient aggregate of key {key} has a sum of squares that is negative or not \
         finite (each key's part is its gradient sum, then the sum of their squares)"
    )]
    BadSquares {
        /// The key whose squares are bad.
        key: Key,
    },
}

/// Bad input to `intent`: nothing was recorded.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum IntentError {
    /// A key is out of range.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// The clock range holds no clock.
    #[error("intent clock range {start}..{end} is empty: the end must be after the start")]
    EmptyRange {
        /// The first clock of the intent.
        start: u64,
        /// The clock after its last.
        end: u64,
    },
}

/// Why an operation could not be issued or did not complete.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpError {
    /// The input was invalid; no parameter changed.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// A node this operation depends on disconnected or stopped answering.
    #[error("{peer} is gone (disconnected or unresponsive); the operation did not complete")]
    PeerGone {
        /// The node that was lost.
        peer: NodeId,
    },
    /// A peer refused the request.
    #[error("{peer} rejected the request: {reason}")]
    Rejected {
        /// The node that refused.
        peer: NodeId,
        /// Its explanation.
        reason: String,
    },
    /// The node is shutting down and accepts no new operations.
    #[error("the node is shutting down")]
    ShuttingDown,
}
