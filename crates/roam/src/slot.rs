//! Per-worker results: where the node's completions wait for the tickets that take them, and
//! the bookkeeping `wait_all` needs.
//!
//! The bookkeeping lives here, behind the slot's mutex, rather than in the `Worker` handle, so
//! that an owned pending operation ([`crate::PendingPull`]) can be waited on, or dropped, with no
//! borrow of the worker that issued it.
//!
//! Invariants:
//! - Every request a worker registers stays listed until its ticket takes the result, or, for a
//!   request nobody will take (detached, or its owned op dropped), until it completes; `running`
//!   counts the listed requests that have not completed, so `wait_all` waits for exactly those.
//! - A completion may arrive before its request is registered (the node lock is released between
//!   issue and registration): it is then listed with its result, and registration leaves it.

use std::collections::HashMap;

use parking_lot::{Condvar, Mutex};
use roam_core::{OpError, PullPart, ReqId};

type OpResult = Result<Vec<PullPart>, OpError>;

/// What becomes of a request's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Its ticket will take it.
    Keep,
    /// Nobody will: drop it (a detached ticket).
    Discard,
    /// Nobody will, but an error is reported by the next `wait_all` (an owned op dropped
    /// without a wait).
    Report,
}

struct Entry {
    fate: Fate,
    result: Option<OpResult>,
}

#[derive(Default)]
struct State {
    ops: HashMap<u64, Entry>,
    running: usize,
    /// The first error of an operation whose ticket was dropped without a wait, for the next
    /// `wait_all` (nobody else will see it).
    dropped_error: Option<OpError>,
}

/// Results delivered to one worker, by request.
#[derive(Default)]
pub(crate) struct WorkerSlot {
    state: Mutex<State>,
    ready: Condvar,
}

impl WorkerSlot {
    /// Lists `req` as issued by this worker, for `wait_all`.
    pub(crate) fn register(&self, req: ReqId) {
        let mut state = self.state.lock();
        let state = &mut *state;
        if let std::collections::hash_map::Entry::Vacant(vacant) = state.ops.entry(req.0) {
            vacant.insert(Entry {
                fate: Fate::Keep,
                result: None,
            });
            state.running += 1;
        }
    }

    /// Hands a completed request's result to its ticket (or disposes of it per its fate).
    pub(crate) fn deliver(&self, req: ReqId, result: OpResult) {
        let mut state = self.state.lock();
        let state = &mut *state;
        match state.ops.get_mut(&req.0) {
            Some(entry) if entry.result.is_none() => {
                state.running -= 1;
                match entry.fate {
                    Fate::Keep => entry.result = Some(result),
                    Fate::Discard => drop(state.ops.remove(&req.0)),
                    Fate::Report => {
                        state.ops.remove(&req.0);
                        if let Err(err) = result {
                            state.dropped_error.get_or_insert(err);
                        }
                    }
                }
            }
            Some(_) => tracing::warn!("request {} completed twice", req.0),
            None => {
                let result = Some(result);
                state.ops.insert(
                    req.0,
                    Entry {
                        fate: Fate::Keep,
                        result,
                    },
                );
            }
        }
        self.ready.notify_all();
    }

    /// Blocks until `req` completes, and takes its result.
    pub(crate) fn take(&self, req: ReqId) -> OpResult {
        let mut state = self.state.lock();
        loop {
            if let Some(entry) = state.ops.get_mut(&req.0)
                && let Some(result) = entry.result.take()
            {
                state.ops.remove(&req.0);
                return result;
            }
            self.ready.wait(&mut state);
        }
    }

    /// Whether `req` has completed (its result is waiting to be taken).
    pub(crate) fn is_complete(&self, req: ReqId) -> bool {
        let state = self.state.lock();
        state.ops.get(&req.0).is_some_and(|e| e.result.is_some())
    }

    /// Gives up on `req`'s result: it is disposed of per `fate` now if it is in, else when it
    /// arrives; `wait_all` still waits for the request meanwhile.
    pub(crate) fn abandon(&self, req: ReqId, fate: Fate) {
        let mut state = self.state.lock();
        let Some(entry) = state.ops.get_mut(&req.0) else {
            return;
        };
        match entry.result.take() {
            None => entry.fate = fate,
            Some(result) => {
                state.ops.remove(&req.0);
                if let (Fate::Report, Err(err)) = (fate, result) {
                    state.dropped_error.get_or_insert(err);
                }
            }
        }
    }

    /// Keeps the error of an operation whose ticket was dropped, for the next `wait_all`.
    pub(crate) fn record_dropped(&self, err: OpError) {
        self.state.lock().dropped_error.get_or_insert(err);
    }

    /// Blocks until every registered request has completed. Results stay for their tickets;
    /// returns the error of the earliest failed one still listed, or else the first error of an
    /// operation dropped without a wait since the last call.
    pub(crate) fn wait_all(&self) -> Result<(), OpError> {
        let mut state = self.state.lock();
        while state.running > 0 {
            self.ready.wait(&mut state);
        }
        let failed = state
            .ops
            .iter()
            .filter_map(|(&req, e)| match &e.result {
                Some(Err(err)) => Some((req, err)),
                _ => None,
            })
            .min_by_key(|&(req, _)| req)
            .map(|(_, err)| err.clone());
        let dropped = state.dropped_error.take();
        failed.or(dropped).map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use roam_core::NodeId;

    use super::*;

    fn lost() -> OpError {
        OpError::PeerGone { peer: NodeId(1) }
    }

    #[test]
    fn early_completions_and_fates() {
        let slot = WorkerSlot::default();
        // Completed before it was registered: registration keeps the result.
        slot.deliver(ReqId(1), Ok(Vec::new()));
        slot.register(ReqId(1));
        assert!(slot.is_complete(ReqId(1)));
        slot.register(ReqId(2));
        slot.register(ReqId(3));
        slot.abandon(ReqId(2), Fate::Discard);
        slot.abandon(ReqId(3), Fate::Report);
        slot.deliver(ReqId(2), Err(lost()));
        slot.deliver(ReqId(3), Err(lost()));
        assert_eq!(
            slot.wait_all(),
            Err(lost()),
            "the dropped op's error is reported"
        );
        assert_eq!(slot.wait_all(), Ok(()), "once");
        assert!(slot.take(ReqId(1)).is_ok());
        assert!(slot.state.lock().ops.is_empty(), "nothing left behind");
    }
}
