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
//! Replicated keys ([`crate::History::is_replicated`]) are skipped by every checker: they are
//! only eventually consistent (a push lands in the local replica and reaches the others in the
//! background), so tests check them by value after a `sync_replicas`.
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

mod final_sums;
mod linearizable;
mod read_by_read;
mod subset;

pub use final_sums::{FinalVerdict, KeyFinal, check_final_sums_exact, final_sums};
pub use linearizable::{Consistency, LinearizableReport, NotLinearizable, check_linearizable};
pub use read_by_read::{Violation, check_per_key_linearizable};
