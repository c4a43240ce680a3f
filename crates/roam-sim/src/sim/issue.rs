//! Workers: running a worker's next op through its access front end (`roam_core::access`, the
//! one the real shell uses: validation, the fast path on the node's store, the hand-off of what
//! is not local to the node), recording invocations and returns in the history. The sampling
//! ops are run by `sample.rs` on the same helpers.
//!
//! Invariants: an op's input is validated by the front end before anything changes, local keys
//! are served from the store without the node, and each op's return is recorded exactly once.

use roam_core::{
    AccessError, Completion, Front, Handoff, Key, Node, NodeId, OpError, ReqId, Time, UpdateMode,
    WorkerId,
};

use super::*;
use crate::history::{OpKind, OpRecord, Outcome, Stamp};
use crate::worker::{Blocked, Op, Outstanding};

impl Sim {
    // ----- workers ---------------------------------------------------------------------------

    pub(super) fn complete(&mut self, id: NodeId, c: Completion) {
        let worker = c.worker.index();
        let Some(out) = self.nodes[id.index()]
            .workers
            .get_mut(worker)
            .and_then(|w| w.outstanding.remove(&c.req))
        else {
            self.internal_error(format!(
                "{id} completed unknown request {:?} of worker {}",
                c.req, c.worker.0
            ));
        };
        let outcome = match (c.result, self.history.ops()[out.record].kind) {
            (Ok(output), OpKind::Pull) => {
                let mut buf = out.out;
                for part in &output.into_parts() {
                    part.scatter(&self.cfg.space, &mut buf);
                }
                Outcome::Pulled(buf)
            }
            (Ok(_), OpKind::Checkpoint) => {
                self.note_cut(id.index(), worker);
                Outcome::Done
            }
            (Ok(_), _) => Outcome::Done,
            (Err(err), _) => Outcome::Failed(err),
        };
        self.finish_op(id.index(), worker, out.record, outcome);
    }

    /// Records the return of op `record` of a worker and unblocks the worker if it waited on it.
    pub(super) fn finish_op(&mut self, n: usize, w: usize, record: usize, outcome: Outcome) {
        let at = self.stamp();
        let ok = u64::from(!matches!(outcome, Outcome::Failed(_)));
        self.trace.event(
            self.now.0,
            TAG_RETURN,
            &[n as u64, w as u64, record as u64, ok],
            &[],
        );
        let h = &mut self.history_order;
        h.bytes(&[TAG_RETURN]);
        h.u64(record as u64);
        h.bytes(format!("{outcome:?}").as_bytes());
        self.history.complete(record, at, outcome);
        let think = draw(&mut self.rng, self.cfg.min_think, self.cfg.max_think);
        let worker = &mut self.nodes[n].workers[w];
        let unblock = match worker.blocked {
            Some(Blocked::On(r)) => r == record,
            Some(Blocked::All) => worker.outstanding.is_empty(),
            None => false,
        };
        if unblock {
            worker.blocked = None;
            worker.ready_at = Time(self.now.0 + think);
        }
    }

    pub(super) fn run_worker(&mut self, n: usize, w: usize) {
        let think = draw(&mut self.rng, self.cfg.min_think, self.cfg.max_think);
        let now = self.now;
        let worker = &mut self.nodes[n].workers[w];
        let op = worker
            .script
            .pop_front()
            .expect("ready workers have script left");
        let input = &mut self.inputs[n];
        input.bytes(&[TAG_INVOKE]);
        input.u64(w as u64);
        input.bytes(format!("{op:?}").as_bytes());
        match op {
            Op::Sleep(d) => worker.ready_at = Time(now.0 + d),
            Op::WaitAll => {
                if worker.outstanding.is_empty() {
                    worker.ready_at = Time(now.0 + think);
                } else {
                    worker.blocked = Some(Blocked::All);
                }
            }
            Op::Barrier => self.issue_collective(n, w, OpKind::Barrier, Node::issue_barrier),
            Op::Checkpoint => {
                self.issue_collective(n, w, OpKind::Checkpoint, Node::issue_checkpoint_cut)
            }
            Op::SyncReplicas => {
                self.issue_collective(n, w, OpKind::SyncReplicas, Node::issue_sync_replicas)
            }
            Op::Pull { keys, wait } => self.issue_pull(n, w, keys, Pace { wait, think }),
            Op::Push { keys, vals, wait } => {
                self.issue_push(n, w, keys, vals, UpdateMode::Add, Pace { wait, think })
            }
            Op::Set { keys, vals, wait } => {
                self.issue_push(n, w, keys, vals, UpdateMode::Set, Pace { wait, think })
            }
            Op::PushGradients { keys, grads, wait } => self.issue_push(
                n,
                w,
                keys,
                grads,
                UpdateMode::Gradient,
                Pace { wait, think },
            ),
            Op::PushGradientSums {
                keys,
                aggregates,
                wait,
            } => self.issue_push(
                n,
                w,
                keys,
                aggregates,
                UpdateMode::GradientSums,
                Pace { wait, think },
            ),
            Op::Localize { keys, wait } => self.issue_localize(n, w, keys, Pace { wait, think }),
            Op::MoveHome { key, to, wait } => {
                self.issue_move_home(n, w, key, NodeId(to), Pace { wait, think })
            }
            Op::Drain { node, wait } => self.issue_drain(n, w, NodeId(node), Pace { wait, think }),
            Op::Retire => {
                worker.ready_at = Time(now.0 + think);
                let wid = self.nodes[n].workers[w].id.worker;
                self.nodes[n].node.retire_worker(now, wid);
                self.drain(NodeId(n as u32));
            }
            Op::Sample {
                sampler,
                n: k,
                wait,
            } => self.sample(n, w, sampler, k, Pace { wait, think }),
            Op::PrepareSample { sampler, n: k } => {
                worker.ready_at = Time(now.0 + think);
                self.prepare_sample(n, w, sampler, k, think);
            }
            Op::PullSample { n: k, wait } => self.pull_sample(n, w, k, Pace { wait, think }),
            Op::FinishSample => {
                worker.ready_at = Time(now.0 + think);
                self.finish_sample(n, w);
            }
            Op::Intent { keys, start, end } => {
                worker.ready_at = Time(now.0 + think);
                self.issue_intent(n, w, Some((keys, start, end)), think);
            }
            Op::AdvanceClock => {
                worker.ready_at = Time(now.0 + think);
                self.issue_intent(n, w, None, think);
            }
        }
        if self.nodes[n].workers[w].script.is_empty() {
            // A finished worker's clock is infinite: its intents end (replicas they kept go).
            let (now, invoke) = (self.now, self.stamp());
            let (front, node, id) = self.front_of(n, w);
            if let Some(handoff) = front.finish_intents() {
                let keys = handoff.keys().to_vec();
                let req = handoff.issue(node, now, id);
                let record =
                    self.invoke_at(invoke, (n, w), OpKind::Localize, keys, Vec::new(), false);
                let detached = Pace {
                    wait: false,
                    think: 0,
                };
                self.hand_off(n, w, req, record, Vec::new(), detached);
            }
        }
    }

    /// Issues a collective (a barrier, a replica sync) with `issue` and blocks the worker on it.
    fn issue_collective(
        &mut self,
        n: usize,
        w: usize,
        kind: OpKind,
        issue: fn(&mut Node, Time, WorkerId) -> ReqId,
    ) {
        let record = self.invoke(n, w, kind, Vec::new(), Vec::new(), true);
        let wid = self.nodes[n].workers[w].id.worker;
        let req = issue(&mut self.nodes[n].node, self.now, wid);
        let worker = &mut self.nodes[n].workers[w];
        worker.outstanding.insert(
            req,
            Outstanding {
                record,
                out: Vec::new(),
            },
        );
        worker.blocked = Some(Blocked::On(record));
        self.drain(NodeId(n as u32));
    }

    pub(super) fn invoke(
        &mut self,
        n: usize,
        w: usize,
        kind: OpKind,
        keys: Vec<Key>,
        input: Vec<f32>,
        sync: bool,
    ) -> usize {
        let invoke = self.stamp();
        self.invoke_at(invoke, (n, w), kind, keys, input, sync)
    }

    /// Records an op invoked at `invoke`, a stamp taken before the front end ran: for ops
    /// whose keys are only known once it has (sampled pulls), so that the record's window
    /// still covers everything the call did.
    pub(super) fn invoke_at(
        &mut self,
        invoke: Stamp,
        (n, w): (usize, usize),
        kind: OpKind,
        keys: Vec<Key>,
        input: Vec<f32>,
        sync: bool,
    ) -> usize {
        let worker = &mut self.nodes[n].workers[w];
        let program_index = worker.issued;
        worker.issued += 1;
        let record = OpRecord {
            id: 0,
            worker: worker.id,
            program_index,
            kind,
            keys,
            input,
            sync,
            invoke,
            ret: None,
            outcome: Outcome::Pending,
        };
        let id = self.history.invoke(record);
        // Which worker's which op this record is: ids follow invocation order, so they alone
        // would not tell two histories apart.
        for word in [
            TAG_INVOKE as u64,
            n as u64,
            w as u64,
            program_index as u64,
            id as u64,
        ] {
            self.history_order.u64(word);
        }
        self.trace.event(
            self.now.0,
            TAG_INVOKE,
            &[n as u64, w as u64, id as u64, kind as u64],
            &[],
        );
        id
    }

    /// Ends an op that needed no message (all keys local, or invalid input): it returns now and
    /// the worker goes on after `think`.
    pub(super) fn finish_locally(
        &mut self,
        n: usize,
        w: usize,
        record: usize,
        outcome: Outcome,
        think: u64,
    ) {
        self.finish_op(n, w, record, outcome);
        self.nodes[n].workers[w].ready_at = Time(self.now.0 + think);
    }

    /// Hands the op to the node: registers it, blocks the worker on it if synchronous, and
    /// drains the node (which may complete it at once).
    pub(super) fn hand_off(
        &mut self,
        n: usize,
        w: usize,
        req: ReqId,
        record: usize,
        out: Vec<f32>,
        pace: Pace,
    ) {
        let now = self.now;
        let worker = &mut self.nodes[n].workers[w];
        worker.outstanding.insert(req, Outstanding { record, out });
        if pace.wait {
            worker.blocked = Some(Blocked::On(record));
        } else {
            worker.ready_at = Time(now.0 + pace.think);
        }
        self.drain(NodeId(n as u32));
    }

    /// Worker `w`'s front end, its node, and its id there.
    fn front_of(&mut self, n: usize, w: usize) -> (&mut Front, &mut Node, WorkerId) {
        let node = &mut self.nodes[n];
        let worker = &mut node.workers[w];
        (&mut worker.front, &mut node.node, worker.id.worker)
    }

    /// Ends op `record` as the front end left it: refused, served in full, or handed to the
    /// node. `out` is a pull's buffer (empty for other ops).
    pub(super) fn after_front(
        &mut self,
        (n, w, record): (usize, usize, usize),
        issued: Result<Option<ReqId>, AccessError>,
        out: Vec<f32>,
        pace: Pace,
    ) {
        match issued {
            Err(err) => {
                let failed = Outcome::Failed(OpError::from(err));
                self.finish_locally(n, w, record, failed, pace.think);
            }
            Ok(None) => {
                let outcome = match self.history.ops()[record].kind {
                    OpKind::Pull => Outcome::Pulled(out),
                    _ => Outcome::Done,
                };
                self.finish_locally(n, w, record, outcome, pace.think);
            }
            Ok(Some(req)) => self.hand_off(n, w, req, record, out, pace),
        }
    }

    pub(super) fn issue_pull(&mut self, n: usize, w: usize, keys: Vec<Key>, pace: Pace) {
        let space = &self.cfg.space;
        // The buffer a caller would pass: the keys' values (a key out of range takes the uniform
        // length, so that the front end names the key rather than the buffer's length).
        let buf_len = match space.uniform_len() {
            Some(len) => keys.len() * len,
            None => keys
                .iter()
                .filter(|&&k| space.contains(k))
                .map(|&k| space.len(k))
                .sum(),
        };
        let record = self.invoke(n, w, OpKind::Pull, keys.clone(), Vec::new(), pace.wait);
        let mut out = vec![0.0; buf_len];
        let now = self.now;
        let (front, node, id) = self.front_of(n, w);
        let issued = issue(front.pull(&keys, &mut out), node, now, id);
        self.after_front((n, w, record), issued, out, pace);
    }

    pub(super) fn issue_push(
        &mut self,
        n: usize,
        w: usize,
        keys: Vec<Key>,
        vals: Vec<f32>,
        mode: UpdateMode,
        pace: Pace,
    ) {
        // SGD's step `w -= lr·g` is the addition of `−(lr·g)`, bit for bit (the product rounds
        // the same whatever its sign): recorded as that push, so every checker covers it.
        // Stateful optimizers' gradients are recorded as such (see `OpKind::Gradient`).
        let (kind, input) = match (mode, self.cfg.space.optimizer()) {
            (UpdateMode::Add, _) => (OpKind::Push, vals.clone()),
            (UpdateMode::Set, _) => (OpKind::Set, vals.clone()),
            (UpdateMode::Gradient, Some(roam_core::Optimizer::Sgd { lr })) => {
                (OpKind::Push, vals.iter().map(|g| -(lr * g)).collect())
            }
            (UpdateMode::Gradient, _) => (OpKind::Gradient, vals.clone()),
            // An aggregate's sums are what SGD steps with (the squares are unused); under a
            // stateful optimizer the sums stand for the write (optimizer tests model it).
            (UpdateMode::GradientSums, opt) => {
                let mut sums = Vec::with_capacity(vals.len() / 2);
                let mut at = 0;
                for &key in &keys {
                    let len = self
                        .cfg
                        .space
                        .len(key)
                        .min(vals.len().saturating_sub(at) / 2);
                    sums.extend_from_slice(&vals[at..at + len]);
                    at += 2 * len;
                }
                match opt {
                    Some(roam_core::Optimizer::Sgd { lr }) => {
                        (OpKind::Push, sums.iter().map(|g| -(lr * g)).collect())
                    }
                    _ => (OpKind::Gradient, sums),
                }
            }
        };
        let record = self.invoke(n, w, kind, keys.clone(), input, pace.wait);
        let now = self.now;
        let (front, node, id) = self.front_of(n, w);
        let pushed = match mode {
            UpdateMode::Gradient => front.push_gradients(&keys, &vals),
            UpdateMode::GradientSums => front.push_gradient_sums(&keys, &vals),
            _ => front.push(&keys, &vals, mode),
        };
        let issued = issue(pushed, node, now, id);
        self.after_front((n, w, record), issued, Vec::new(), pace);
    }

    /// Like the real shell: a no-op unless keys can move and some key is not local, else the
    /// keys that are not local are handed to the node.
    pub(super) fn issue_localize(&mut self, n: usize, w: usize, keys: Vec<Key>, pace: Pace) {
        let record = self.invoke(n, w, OpKind::Localize, keys.clone(), Vec::new(), pace.wait);
        let now = self.now;
        let (front, node, id) = self.front_of(n, w);
        let issued = issue(front.localize(&keys), node, now, id);
        self.after_front((n, w, record), issued, Vec::new(), pace);
    }

    /// `intent` (with `Some`) or `advance_clock`: the keys of intents due now, if any, are
    /// handed to the node like a detached localize, and recorded as one.
    pub(super) fn issue_intent(
        &mut self,
        n: usize,
        w: usize,
        intent: Option<(Vec<Key>, u64, u64)>,
        think: u64,
    ) {
        let (now, invoke) = (self.now, self.stamp());
        let (front, node, id) = self.front_of(n, w);
        let handoff = match &intent {
            Some((keys, start, end)) => front
                .intent(keys, *start, *end)
                .unwrap_or_else(|err| panic!("script error: invalid intent: {err}")),
            None => front.advance_clock(now),
        };
        let Some(handoff) = handoff else { return };
        let keys = handoff.keys().to_vec();
        let req = handoff.issue(node, now, id);
        let record = self.invoke_at(invoke, (n, w), OpKind::Localize, keys, Vec::new(), false);
        let detached = Pace { wait: false, think };
        self.hand_off(n, w, req, record, Vec::new(), detached);
    }

    /// Moves the home of `key`'s bucket; the node validates the rest.
    pub(super) fn issue_move_home(&mut self, n: usize, w: usize, key: Key, to: NodeId, pace: Pace) {
        let record = self.invoke(n, w, OpKind::MoveHome, vec![key], Vec::new(), pace.wait);
        let bucket = self.nodes[n].node.directory().bucket(key);
        let wid = self.nodes[n].workers[w].id.worker;
        let req = self.nodes[n]
            .node
            .issue_move_home(self.now, wid, bucket, to);
        self.hand_off(n, w, req, record, Vec::new(), pace);
    }

    /// Drains node `node`; the coordinator validates it.
    pub(super) fn issue_drain(&mut self, n: usize, w: usize, node: NodeId, pace: Pace) {
        let record = self.invoke(n, w, OpKind::Drain, Vec::new(), Vec::new(), pace.wait);
        let wid = self.nodes[n].workers[w].id.worker;
        let req = self.nodes[n].node.issue_drain(self.now, wid, node);
        self.hand_off(n, w, req, record, Vec::new(), pace);
    }
}

/// Issues what the front end handed off, if anything, into the node: the request, or `None` if
/// the front end served every key.
fn issue(
    access: Result<Option<Handoff<'_>>, AccessError>,
    node: &mut Node,
    now: Time,
    worker: WorkerId,
) -> Result<Option<ReqId>, AccessError> {
    Ok(access?.map(|handoff| handoff.issue(node, now, worker)))
}
