//! Sampling ops: a worker's `prepare_sample`, `pull_sample` and `finish_sample` through its
//! access front end (`roam_core::Front`, the code the real shell runs), driven the way
//! `roam::Worker` drives them.
//!
//! - The localize hand-off of a prepare (`preloc`, `pool`) is issued into the node and never
//!   waited for: the real shell abandons its ticket, so the worker goes on at once and the
//!   outcome does not matter to it. It is recorded as an asynchronous localize of the keys
//!   handed off (it reads and writes nothing, so no checker judges it) and, like a detached
//!   ticket, still counts for [`Op::WaitAll`](crate::Op::WaitAll).
//! - Each `pull_sample` call is recorded as a pull of the keys it drew with the values it read:
//!   the checkers then hold sampled reads to the same guarantees as ordinary pulls (never torn,
//!   never from the future, linearizable per key). The keys are only known once the front end
//!   has drawn them, so the record is stamped before the call and written after it: its window
//!   covers the local reads the call made.
//!
//! Invariant: a refused call (a `SampleError`) changes nothing but [`SampleStats::refused`], as
//! the front end itself changes no handle and no random state then.

use roam_core::{SampleError, SamplerId, Time};

use super::*;
use crate::history::OpKind;
use crate::worker::SampleStats;

impl Sim {
    /// What worker `worker`'s sampling ops did so far with sampler `sampler` (refusals count
    /// under the sampler index the op named).
    pub fn sample_stats(&self, worker: WorkerRef, sampler: u32) -> SampleStats {
        let w = &self.nodes[worker.node.index()].workers[worker.worker.index()];
        w.sample_stats.get(&sampler).copied().unwrap_or_default()
    }

    /// The local-access counters of `worker`'s front end (samples drawn, `local` fallbacks,
    /// keys served from the store).
    pub fn worker_counters(&self, worker: WorkerRef) -> &roam_core::stats::WorkerCounters {
        self.nodes[worker.node.index()].workers[worker.worker.index()]
            .front
            .counters()
    }

    /// [`Op::Sample`](crate::Op::Sample): prepare, pull every sample in one or two calls,
    /// finish.
    pub(super) fn sample(&mut self, n: usize, w: usize, sampler: u32, k: usize, pace: Pace) {
        self.nodes[n].workers[w].ready_at = Time(self.now.0 + pace.think);
        if !self.prepare_sample(n, w, sampler, k, pace.think) {
            return;
        }
        // Two calls exercise a handle handed out in parts; the first never blocks, as a
        // caller reading the second half while the first is in flight.
        let first = k / 2;
        if first > 0 {
            let early = Pace {
                wait: false,
                ..pace
            };
            self.pull_sample(n, w, first, early);
        }
        if k > first {
            self.pull_sample(n, w, k - first, pace);
        }
        self.finish_sample(n, w);
    }

    /// `prepare_sample`: opens the worker's handle (finishing an open one) and issues the
    /// localize hand-off without waiting for it. False if the front end refused.
    pub(super) fn prepare_sample(
        &mut self,
        n: usize,
        w: usize,
        sampler: u32,
        k: usize,
        think: u64,
    ) -> bool {
        if self.nodes[n].workers[w].sample.is_some() {
            self.finish_sample(n, w);
        }
        let (now, invoke) = (self.now, self.stamp());
        let SimNode { node, workers, .. } = &mut self.nodes[n];
        let worker = &mut workers[w];
        let wid = worker.id.worker;
        let localize = match worker.front.prepare_sample(now, SamplerId(sampler), k) {
            Err(err) => {
                self.refused(n, w, sampler, err);
                return false;
            }
            Ok((handle, handoff)) => {
                worker.sample = Some(handle);
                handoff.map(|h| (h.keys().to_vec(), h.issue(node, now, wid)))
            }
        };
        if let Some((keys, req)) = localize {
            worker
                .sample_stats
                .entry(sampler)
                .or_default()
                .localized_keys += keys.len() as u64;
            let record = self.invoke_at(invoke, (n, w), OpKind::Localize, keys, Vec::new(), false);
            let detached = Pace { wait: false, think };
            self.hand_off(n, w, req, record, Vec::new(), detached);
        }
        true
    }

    /// `pull_sample` of `k` samples of the open handle, recorded as a pull of the keys drawn.
    pub(super) fn pull_sample(&mut self, n: usize, w: usize, k: usize, pace: Pace) {
        let (now, invoke) = (self.now, self.stamp());
        let SimNode { node, workers, .. } = &mut self.nodes[n];
        let worker = &mut workers[w];
        let wid = worker.id.worker;
        let Some(handle) = worker.sample.as_mut() else {
            let who = worker.id;
            self.internal_error(format!("{who}: PullSample without PrepareSample"));
        };
        let sampler = handle.sampler().0;
        let len = match self.cfg.samplers.get(sampler as usize) {
            Some(spec) => spec
                .value_len(&self.cfg.space)
                .expect("nodes registered every sampler"),
            // An unknown sampler has no handle: prepare refused it.
            None => 0,
        };
        let mut keys = vec![0; k];
        let mut out = vec![0.0; k * len];
        let issued = match worker.front.pull_sample(handle, &mut keys, &mut out) {
            Err(err) => {
                worker.ready_at = Time(now.0 + pace.think);
                self.refused(n, w, sampler, err);
                return;
            }
            Ok(handoff) => handoff.map(|h| (h.keys().len(), h.issue(node, now, wid))),
        };
        let stats = worker.sample_stats.entry(sampler).or_default();
        stats.pulls += 1;
        stats.samples += k as u64;
        stats.remote_samples += issued.map_or(0, |(keys, _)| keys as u64);
        let record = self.invoke_at(invoke, (n, w), OpKind::Pull, keys, Vec::new(), pace.wait);
        let req = issued.map(|(_, req)| req);
        self.after_front((n, w, record), Ok(req), out, pace);
    }

    /// `finish_sample` of the open handle.
    pub(super) fn finish_sample(&mut self, n: usize, w: usize) {
        let worker = &mut self.nodes[n].workers[w];
        let Some(handle) = worker.sample.take() else {
            let who = worker.id;
            self.internal_error(format!("{who}: FinishSample without PrepareSample"));
        };
        let sampler = handle.sampler().0;
        let left = worker.front.finish_sample(handle);
        worker.sample_stats.entry(sampler).or_default().unpulled += left as u64;
    }

    /// Counts a refused call; the refusal is folded into the node's input hash, as the op that
    /// made it was.
    fn refused(&mut self, n: usize, w: usize, sampler: u32, err: SampleError) {
        let stats = &mut self.nodes[n].workers[w].sample_stats;
        stats.entry(sampler).or_default().refused += 1;
        self.inputs[n].bytes(err.to_string().as_bytes());
    }
}
