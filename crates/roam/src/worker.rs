//! The worker handle: one per worker thread, the API of pull, push, set, wait and barrier.
//!
//! Every access goes through the worker's [`Front`] (`roam_core::access`): the whole batch is
//! validated (nothing changes on bad input), local keys are served straight from the store
//! under their latches — no message, no node lock — and only the remaining keys are handed to
//! the protocol, one batched message per destination node.
//!
//! An issued operation waits for its result in the worker's slot (`slot.rs`), which it reaches
//! through a shared handle rather than a borrow of the worker. Two kinds of pending operation
//! sit on top:
//! - a [`Ticket`] borrows a pull's output buffer until it is waited (or dropped, which also
//!   waits), so remote values are copied in only when the caller asks for them and the buffer
//!   can never be read half-filled; tickets of pushes, sets and localizes borrow nothing;
//! - a [`PendingPull`] owns its output buffer and hands it back when waited, so any number of
//!   pulls can be in flight without split borrows, and the operation can be stored anywhere
//!   (the Python binding keeps them in Python objects).

use std::cell::RefCell;
use std::sync::Arc;

use roam_core::{
    AccessError, Directory, Front, Handoff, IntentError, Key, KeySpace, Node, OpError, ReqId,
    SampleError, SampleHandle, SamplerId, Time, UpdateMode, WorkerId,
};

use crate::checkpoint::CheckpointError;
use crate::error::PullRefused;
use crate::runtime::Shared;
use crate::slot::{Fate, WorkerSlot};

/// A handle for one worker thread. Not `Sync`: each thread takes its own from the node.
pub struct Worker {
    owner: Arc<Owner>,
    front: RefCell<Front>,
}

/// The node and slot of one worker. Each pending operation holds a reference: one `Arc` per
/// worker, so counting those references touches no cache line that other workers write.
struct Owner {
    shared: Arc<Shared>,
    id: WorkerId,
}

impl Owner {
    fn slot(&self) -> &WorkerSlot {
        &self.shared.slots[self.id.index()]
    }
}

/// A request handed to the node whose result its operation has not taken yet.
struct InFlight {
    owner: Arc<Owner>,
    req: ReqId,
}

impl InFlight {
    fn is_finished(&self) -> bool {
        self.owner.slot().is_complete(self.req)
    }

    /// Blocks until the request completes; a pull's remote values are copied into `out`.
    fn wait(&self, out: Option<&mut [f32]>) -> Result<(), OpError> {
        let parts = self.owner.slot().take(self.req)?;
        if let Some(out) = out {
            for part in &parts {
                part.scatter(&self.owner.shared.space, out);
            }
        }
        Ok(())
    }
}

/// An issued operation. Wait on it with [`Ticket::wait`] (or [`Worker::wait`]); dropping it
/// waits too. For a pull, the output buffer is complete once the ticket is waited.
///
/// A pull's ticket borrows its output buffer; the tickets of [`Worker::push`], [`Worker::set`]
/// and [`Worker::localize`] borrow nothing (`Ticket<'static>`) and can be kept anywhere. For many
/// pulls in flight at once, [`Worker::pull_owned`] avoids splitting one buffer's borrows.
#[must_use = "an operation is only known to be complete once its ticket is waited"]
pub struct Ticket<'a> {
    inflight: Option<InFlight>,
    out: Option<&'a mut [f32]>,
}

impl Ticket<'_> {
    /// Whether the operation has completed (a following `wait` returns immediately).
    pub fn is_finished(&self) -> bool {
        self.inflight.as_ref().is_none_or(InFlight::is_finished)
    }

    /// Lets the operation complete in the background without waiting for it here (dropping a
    /// ticket waits). Its outcome, including any error, is discarded; [`Worker::wait_all`] and
    /// [`Worker::barrier`] still wait for it. Meant for hints such as `localize`; a detached
    /// pull still runs, but its values are not copied into the buffer.
    pub fn detach(mut self) {
        if let Some(inflight) = self.inflight.take() {
            inflight.owner.slot().abandon(inflight.req, Fate::Discard);
        }
    }

    /// Blocks until the operation completes; for a pull, the values are then in the buffer.
    pub fn wait(mut self) -> Result<(), OpError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<(), OpError> {
        match self.inflight.take() {
            Some(inflight) => inflight.wait(self.out.as_deref_mut()),
            None => Ok(()),
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let Some(inflight) = self.inflight.take() else {
            return;
        };
        if let Err(err) = inflight.wait(self.out.as_deref_mut()) {
            tracing::warn!("operation dropped without wait failed: {err}");
            inflight.owner.slot().record_dropped(err);
        }
    }
}

/// A pull that owns its output buffer: [`Worker::pull_owned`]. Waiting returns the buffer with
/// every key's values in it.
///
/// It borrows neither the worker nor the buffer, so many can be in flight at once (a window of
/// pulls ahead of the computation), kept in any collection, or sent to another thread to be
/// waited there. Dropping it without a wait does not block: the pull still completes, its
/// values are discarded, and an error is reported by the worker's next [`Worker::wait_all`] or
/// [`Worker::barrier`].
///
/// `B` is any buffer whose [`AsMut<[f32]>`](AsMut) gives the same slice every time: `Vec<f32>`,
/// `Box<[f32]>`, an array, a `&mut [f32]`.
#[must_use = "a pull's values are only in its buffer once it is waited"]
pub struct PendingPull<B = Vec<f32>> {
    inflight: Option<InFlight>,
    /// Taken only by `finish`, which consumes the operation.
    out: Option<B>,
    len: usize,
}

impl<B> std::fmt::Debug for PendingPull<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingPull")
            .field("values", &self.len)
            .field("req", &self.inflight.as_ref().map(|i| i.req))
            .finish_non_exhaustive()
    }
}

impl<B> PendingPull<B> {
    /// Whether the pull has completed (a following `wait` copies the values and returns).
    pub fn is_finished(&self) -> bool {
        self.inflight.as_ref().is_none_or(InFlight::is_finished)
    }
}

impl<B: AsMut<[f32]>> PendingPull<B> {
    /// Blocks until the pull completes and returns the buffer holding the keys' values.
    pub fn wait(self) -> Result<B, OpError> {
        let (out, result) = self.finish();
        result.map(|()| out)
    }

    /// Like [`PendingPull::wait`], but hands the buffer back also when the pull failed (its
    /// contents are then unspecified), e.g. to reuse it.
    pub fn finish(mut self) -> (B, Result<(), OpError>) {
        let mut out = self.out.take().expect("the buffer is only taken here");
        let result = match self.inflight.take() {
            None => Ok(()),
            Some(inflight) => {
                let slice = out.as_mut();
                assert_eq!(
                    slice.len(),
                    self.len,
                    "the pull's buffer changed length while the pull was in flight"
                );
                inflight.wait(Some(slice))
            }
        };
        (out, result)
    }
}

impl<B> Drop for PendingPull<B> {
    fn drop(&mut self) {
        if let Some(inflight) = self.inflight.take() {
            inflight.owner.slot().abandon(inflight.req, Fate::Report);
        }
    }
}

/// A worker handle that goes away (its thread finished or failed) is retired: it counts as
/// arrived at its node's later barriers, so its siblings are not left waiting for it.
impl Drop for Worker {
    fn drop(&mut self) {
        // A finished worker's clock is infinite: its intents end, and replicas kept only for
        // them go (their deltas flushed to the owners).
        {
            let mut front = self.front.borrow_mut();
            if let Some(inflight) = self.hand_off(front.finish_intents()) {
                Ticket {
                    inflight: Some(inflight),
                    out: None,
                }
                .detach();
            }
        }
        let id = self.owner.id;
        self.owner
            .shared
            .with_node(|node, now| node.retire_worker(now, id));
    }
}

impl Worker {
    pub(crate) fn new(shared: Arc<Shared>, id: WorkerId) -> Self {
        let counters = shared.worker_counters[id.index()].clone();
        let front = shared.with_node(|node, _| Front::new(node, id, counters));
        Self {
            owner: Arc::new(Owner { shared, id }),
            front: RefCell::new(front),
        }
    }

    fn shared(&self) -> &Shared {
        &self.owner.shared
    }

    /// This worker's index on its node.
    pub fn id(&self) -> u32 {
        self.owner.id.0
    }

    /// This worker's node rank.
    pub fn rank(&self) -> u32 {
        self.shared().rank.0
    }

    /// Nodes in the cluster.
    pub fn num_nodes(&self) -> u32 {
        self.shared().num_nodes
    }

    /// Worker threads per node.
    pub fn workers_per_node(&self) -> u32 {
        self.shared().workers_per_node
    }

    /// This worker's index among all workers of all nodes.
    pub fn global_id(&self) -> u32 {
        self.shared().rank.0 * self.shared().workers_per_node + self.owner.id.0
    }

    /// The key space.
    pub fn key_space(&self) -> &KeySpace {
        &self.shared().space
    }

    /// A snapshot of this node's directory (see [`crate::NodeHandle::directory`]).
    pub fn directory(&self) -> Directory {
        self.shared().with_node(|node, _| node.directory().clone())
    }

    /// Issues what the front end left for the node, if anything, under the node lock.
    fn hand_off(&self, handoff: Option<Handoff<'_>>) -> Option<InFlight> {
        let handoff = handoff?;
        let id = self.owner.id;
        let req = self
            .shared()
            .with_node(|node, now| handoff.issue(node, now, id));
        self.owner.slot().register(req);
        Some(InFlight {
            owner: self.owner.clone(),
            req,
        })
    }

    /// Reads the values of `keys` into `out` (their lengths concatenated in key order). Local
    /// keys are copied before this returns; the rest arrive when the ticket is waited. A key
    /// named twice is read twice (its values appear at both places).
    pub fn pull<'a>(&self, keys: &[Key], out: &'a mut [f32]) -> Result<Ticket<'a>, AccessError> {
        let mut front = self.front.borrow_mut();
        let inflight = self.hand_off(front.pull(keys, out)?);
        Ok(Ticket {
            out: inflight.is_some().then_some(out),
            inflight,
        })
    }

    /// [`Worker::pull`] into a buffer the operation owns, for pulls kept in flight while others
    /// are issued. Waiting the [`PendingPull`] returns the buffer with the values in it; bad
    /// input hands it back in the error.
    ///
    /// A window of pulls running ahead of the computation that uses them:
    ///
    /// ```no_run
    /// # fn train(
    /// #     worker: &roam::Worker,
    /// #     batches: &[Vec<u64>],
    /// #     step: impl Fn(&[u64], &[f32]),
    /// # ) -> Result<(), roam::OpError> {
    /// use std::collections::VecDeque;
    ///
    /// let len = worker.key_space().uniform_len().expect("uniform value lengths");
    /// let mut window = VecDeque::new();
    /// for keys in batches {
    ///     let pending = worker.pull_owned(keys, vec![0.0; keys.len() * len])?;
    ///     window.push_back((keys, pending));
    ///     if window.len() == 8 {
    ///         // The oldest of 8 pulls in flight: its values are usually in by now.
    ///         let (keys, pending) = window.pop_front().unwrap();
    ///         step(keys, &pending.wait()?);
    ///     }
    /// }
    /// for (keys, pending) in window {
    ///     step(keys, &pending.wait()?);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn pull_owned<B: AsMut<[f32]>>(
        &self,
        keys: &[Key],
        mut out: B,
    ) -> Result<PendingPull<B>, PullRefused<B>> {
        let mut front = self.front.borrow_mut();
        let slice = out.as_mut();
        let len = slice.len();
        match front.pull(keys, slice) {
            Ok(handoff) => Ok(PendingPull {
                inflight: self.hand_off(handoff),
                out: Some(out),
                len,
            }),
            Err(error) => Err(PullRefused { error, out }),
        }
    }

    /// Adds `vals` to the values of `keys` (additive update, e.g. a gradient step). A key named
    /// twice in one batch is updated twice: both of its updates are added. `vals` may be reused
    /// as soon as this returns.
    pub fn push(&self, keys: &[Key], vals: &[f32]) -> Result<Ticket<'static>, AccessError> {
        self.update(keys, vals, UpdateMode::Add)
    }

    /// Overwrites the values of `keys` with `vals`. A key named twice is set twice, in batch
    /// order when it is local; do not rely on which write wins for a remote key.
    pub fn set(&self, keys: &[Key], vals: &[f32]) -> Result<Ticket<'static>, AccessError> {
        self.update(keys, vals, UpdateMode::Set)
    }

    /// Applies `grads` to `keys` as gradients of the configured optimizer
    /// ([`crate::Config::optimizer`]), where each key's record lives: local keys now, under
    /// their latch like a push; remote keys at their owner. The optimizer's state (Adagrad's
    /// accumulator, Adam's moments and step count, FTRL's `z` and `n`) stays hidden in the
    /// record: it moves with the key and is checkpointed, and pulls never return it. A key
    /// named twice gets two steps. Fails, changing nothing, without an optimizer. A replicated
    /// key's gradient under a stateful optimizer accumulates here for its hub's next step
    /// (`docs/embeddings.md`, "Where the step runs").
    pub fn push_gradients(
        &self,
        keys: &[Key],
        grads: &[f32],
    ) -> Result<Ticket<'static>, AccessError> {
        let mut front = self.front.borrow_mut();
        let inflight = self.hand_off(front.push_gradients(keys, grads)?);
        Ok(Ticket {
            inflight,
            out: None,
        })
    }

    /// Applies aggregates of gradients to `keys`, one step per key standing for all of them
    /// ([`roam_core::Optimizer::step_sums`]): key `i`'s part of `aggregates` is twice its
    /// length, the sum of its gradients then the sum of their squares. For gradients gathered
    /// before they travel (a worker's copies of rows held elsewhere, pushed now and then):
    /// the optimizer's state grows as if each gradient had been pushed (Adagrad's accumulator
    /// by the squares, not by the square of the sum) and the row moves about as far as those
    /// steps would. Where each record lives, like [`Worker::push_gradients`]; a replicated key
    /// adds the aggregate's sums to the round's sum it steps with (the squares are dropped:
    /// `docs/embeddings.md`, "Aggregates of gradients"). Fails, changing nothing, without an
    /// optimizer, when `aggregates` is not twice the keys' lengths, or on a negative or
    /// non-finite square.
    pub fn push_gradient_sums(
        &self,
        keys: &[Key],
        aggregates: &[f32],
    ) -> Result<Ticket<'static>, AccessError> {
        self.update(keys, aggregates, UpdateMode::GradientSums)
    }

    // Inlined into `push`, `set` and `push_gradient_sums` so that each gets a loop specialised
    // to its mode.
    #[inline(always)]
    fn update(
        &self,
        keys: &[Key],
        vals: &[f32],
        mode: UpdateMode,
    ) -> Result<Ticket<'static>, AccessError> {
        let mut front = self.front.borrow_mut();
        let inflight = self.hand_off(front.push(keys, vals, mode)?);
        Ok(Ticket {
            inflight,
            out: None,
        })
    }

    /// Moves ownership of `keys` to this node (dynamic allocation; a no-op otherwise). Keys
    /// already here or on their way are cheap; the ticket completes once all have landed.
    /// Accesses stay correct wherever the keys are while they move.
    pub fn localize(&self, keys: &[Key]) -> Result<Ticket<'static>, AccessError> {
        let mut front = self.front.borrow_mut();
        let inflight = self.hand_off(front.localize(keys)?);
        Ok(Ticket {
            inflight,
            out: None,
        })
    }

    /// Signals that this worker will access `keys` while its clock ([`Worker::advance_clock`])
    /// is in `start..end` (AdaPM's intent). roam decides when to act: under dynamic
    /// allocation the keys are brought here shortly before `start` — how long before is
    /// measured from this worker's clock rate and the time keys take to arrive, nothing to
    /// tune (see [`crate::Config::intent_timing`]). Intents are cheap: no lock and no message
    /// unless an action is due; far-ahead intents wait in this worker's queue (beyond
    /// `roam_core::intent::MAX_PENDING_KEYS` keys the earliest are acted on at once, never
    /// dropped). Under static allocation intents are only counted.
    ///
    /// ```no_run
    /// # fn f(worker: &roam::Worker, batches: &[Vec<u64>]) -> anyhow::Result<()> {
    /// const AHEAD: usize = 100;
    /// for (i, batch) in batches.iter().enumerate().take(AHEAD) {
    ///     worker.intent(batch, i as u64, i as u64 + 1)?;
    /// }
    /// for (i, batch) in batches.iter().enumerate() {
    ///     if let Some(later) = batches.get(i + AHEAD) {
    ///         worker.intent(later, (i + AHEAD) as u64, (i + AHEAD) as u64 + 1)?;
    ///     }
    ///     // ... pull, compute and push `batch` ...
    ///     worker.advance_clock();
    /// }
    /// # Ok(()) }
    /// ```
    pub fn intent(&self, keys: &[Key], start: u64, end: u64) -> Result<(), IntentError> {
        let mut front = self.front.borrow_mut();
        // A hint, like a detached localize: nothing waits for it.
        if let Some(inflight) = self.hand_off(front.intent(keys, start, end)?) {
            Ticket {
                inflight: Some(inflight),
                out: None,
            }
            .detach();
        }
        Ok(())
    }

    /// Ticks this worker's clock (once per data point or batch), acting on the intents that
    /// start soon; returns the new clock.
    pub fn advance_clock(&self) -> u64 {
        let now = self.shared().now();
        let mut front = self.front.borrow_mut();
        if let Some(inflight) = self.hand_off(front.advance_clock(now)) {
            Ticket {
                inflight: Some(inflight),
                out: None,
            }
            .detach();
        }
        front.current_clock()
    }

    /// This worker's clock: how many times it called [`Worker::advance_clock`].
    pub fn current_clock(&self) -> u64 {
        self.front.borrow().current_clock()
    }

    /// How many clocks before their start intents are acted on now (measured; see
    /// [`Worker::intent`]).
    pub fn intent_window(&self) -> u64 {
        self.front.borrow().intent_window()
    }

    /// Starts drawing `n` samples from sampler `sampler` (registered with
    /// [`crate::Config::add_sampler`]). Under `preloc` the keys are drawn now, and under `pool`
    /// taken from the node's pool; either way the ones not here start moving here (never
    /// waited for: the samples' values are exact wherever their keys are). Draw them with
    /// [`Worker::pull_sample`], in one call or several, and end with [`Worker::finish_sample`].
    ///
    /// ```no_run
    /// # fn f(worker: &roam::Worker, negatives: roam::SamplerId) -> anyhow::Result<()> {
    /// let len = worker.key_space().uniform_len().unwrap();
    /// let mut sample = worker.prepare_sample(negatives, 8)?;
    /// let (mut keys, mut vals) = (vec![0; 8], vec![0.0; 8 * len]);
    /// worker.pull_sample(&mut sample, &mut keys, &mut vals)?.wait()?;
    /// worker.finish_sample(sample);
    /// // ... compute gradients for `keys` from `vals`, then an ordinary push:
    /// worker.push(&keys, &vals)?.detach();
    /// # Ok(()) }
    /// ```
    pub fn prepare_sample(
        &self,
        sampler: SamplerId,
        n: usize,
    ) -> Result<SampleHandle, SampleError> {
        let now = self.shared().now();
        let mut front = self.front.borrow_mut();
        let (handle, localize) = front.prepare_sample(now, sampler, n)?;
        // A hint, like a detached localize: nothing waits for it.
        Ticket {
            inflight: self.hand_off(localize),
            out: None,
        }
        .detach();
        Ok(handle)
    }

    /// [`Worker::prepare_sample`] for samples used while this worker's clock is in
    /// `start..end`: under `preloc` the samples are drawn now and their keys signalled as an
    /// intent ([`Worker::intent`]), so they arrive shortly before `start` instead of at once;
    /// other schemes behave as `prepare_sample`.
    pub fn prepare_sample_intent(
        &self,
        sampler: SamplerId,
        n: usize,
        start: u64,
        end: u64,
    ) -> Result<SampleHandle, SampleError> {
        let now = self.shared().now();
        let mut front = self.front.borrow_mut();
        let (handle, due) = front.prepare_sample_intent(now, sampler, n, (start, end))?;
        Ticket {
            inflight: self.hand_off(due),
            out: None,
        }
        .detach();
        Ok(handle)
    }

    /// Draws `keys.len()` of `sample`'s samples into `keys` and reads their values into `vals`
    /// (`keys.len()` × the sampled keys' value length). Values of keys held here are in `vals`
    /// when this returns; the rest once the ticket is waited. Pushes to sampled keys are
    /// ordinary pushes.
    pub fn pull_sample<'a>(
        &self,
        sample: &mut SampleHandle,
        keys: &mut [Key],
        vals: &'a mut [f32],
    ) -> Result<Ticket<'a>, SampleError> {
        let mut front = self.front.borrow_mut();
        let inflight = self.hand_off(front.pull_sample(sample, keys, vals)?);
        Ok(Ticket {
            out: inflight.is_some().then_some(vals),
            inflight,
        })
    }

    /// Draws `keys.len()` of `sample`'s samples into `keys` without reading their values, to be
    /// read with an ordinary pull together with other keys (one batched pull in which a key
    /// drawn several times, or also used otherwise, is read once). The samples are those
    /// [`Worker::pull_sample`] would give; `local` takes keys held here at the draw.
    pub fn sample_keys(
        &self,
        sample: &mut SampleHandle,
        keys: &mut [Key],
    ) -> Result<(), SampleError> {
        self.front.borrow_mut().sample_keys(sample, keys)
    }

    /// The value length of sampler `sampler`'s samples (`None`: no such sampler).
    pub fn sample_value_len(&self, sampler: SamplerId) -> Option<usize> {
        self.front.borrow().samplers().value_len(sampler)
    }

    /// This worker's local-access and sampling counters (only this worker writes them).
    pub fn counters(&self) -> Arc<roam_core::stats::WorkerCounters> {
        self.front.borrow().counters().clone()
    }

    /// Ends a sampling; returns how many of its samples were never pulled.
    pub fn finish_sample(&self, sample: SampleHandle) -> usize {
        self.front.borrow_mut().finish_sample(sample)
    }

    /// Blocks until `ticket`'s operation completes (same as [`Ticket::wait`]).
    pub fn wait(&self, ticket: Ticket<'_>) -> Result<(), OpError> {
        ticket.wait()
    }

    /// Whether `ticket`'s operation has completed.
    pub fn is_finished(&self, ticket: &Ticket<'_>) -> bool {
        ticket.is_finished()
    }

    /// Blocks until every operation this worker issued has completed. Results stay with their
    /// tickets (a pull's buffer is filled when its ticket is waited); returns the first error
    /// among them, or else the first error of an operation whose ticket (or owned pull) was
    /// dropped without a wait since the last call (detached tickets excepted: their outcome is
    /// discarded).
    pub fn wait_all(&self) -> Result<(), OpError> {
        self.owner.slot().wait_all()
    }

    /// Copies `key`'s values into `out` if the key is local right now; never sends a message.
    pub fn pull_if_local(&self, key: Key, out: &mut [f32]) -> Result<bool, AccessError> {
        self.front.borrow().pull_if_local(key, out)
    }

    /// Waits for this worker's outstanding operations, then for every worker thread of every
    /// node to reach the barrier (a worker whose handle was dropped counts as arrived).
    /// Operations issued before the barrier by any worker have been applied when it returns.
    pub fn barrier(&self) -> Result<(), OpError> {
        self.collective(Node::issue_barrier)
    }

    /// A collective over every worker thread of every node, like [`Worker::barrier`]: when it
    /// returns, every push issued before it by any worker is in every replica of the
    /// replicated keys (see [`crate::Config::replicated_keys`]). Use it before evaluating or
    /// checkpointing; between calls replicas are only eventually consistent.
    pub fn sync_replicas(&self) -> Result<(), OpError> {
        self.collective(Node::issue_sync_replicas)
    }

    /// Writes a checkpoint of every node into `dir` (see [`crate::checkpoint`]), with epoch 0.
    /// A collective like [`Worker::barrier`]: see [`Worker::checkpoint_with`].
    pub fn checkpoint(&self, dir: &std::path::Path) -> Result<(), CheckpointError> {
        self.checkpoint_with(dir, 0, serde_json::Value::Null)
    }

    /// Writes a checkpoint of every node into `dir`, a directory every node can reach, noting
    /// `epoch` (e.g. training epochs completed) in its manifest. A collective over every worker
    /// of every node: it holds every push issued before the call on any worker and none issued
    /// after (the core's cut: replicated keys flushed, keys in transit landed, then each node
    /// writes what it holds). Worker 0 of each node writes the node's shard, worker 0 of rank 0
    /// the manifest, with `app` (rank 0 worker 0's) as the application's state; when the call
    /// returns on rank 0 without error the checkpoint exists. The previous checkpoint in
    /// `dir` stays intact until the new manifest replaces it.
    pub fn checkpoint_with(
        &self,
        dir: &std::path::Path,
        epoch: u64,
        app: serde_json::Value,
    ) -> Result<(), CheckpointError> {
        let writer = self.owner.id.0 == 0;
        let shared = self.shared();
        let started = std::time::Instant::now();
        let (rank, nodes) = (shared.rank.0, shared.num_nodes);
        let id = writer.then(|| crate::checkpoint::next_id(dir));
        if let Some(parent) = writer.then_some(dir) {
            std::fs::create_dir_all(parent).map_err(crate::checkpoint::io_at(parent))?;
        }
        self.collective(Node::issue_checkpoint_cut)?;
        // Frozen, and no worker anywhere pushes until the barrier below: the store is the cut.
        let written = match id {
            Some(id) => {
                let primaries = shared.with_node(|node, _| {
                    // Spilled rows first (`checkpoint/spill.rs`), under the node lock; the
                    // shard's report lists the file.
                    crate::checkpoint::spill::write_spilled(dir, id, rank, nodes, node)
                        .map(|spill| (node.hub_primaries(), spill))
                });
                primaries
                    .and_then(|(primaries, spill)| {
                        crate::checkpoint::write_shard(
                            dir,
                            id,
                            rank,
                            nodes,
                            &shared.store,
                            &primaries,
                            spill,
                        )
                    })
                    .map(Some)
            }
            None => Ok(None),
        };
        // Thaws the nodes; every shard and its report are on disk once it returns.
        self.collective(Node::issue_barrier)?;
        // Errors wait for the last barrier: every worker must arrive there.
        let outcome = written.and_then(|written| match (id, written, rank) {
            (Some(id), Some(_), 0) => {
                crate::checkpoint::finish_manifest(dir, id, epoch, app, nodes, &shared.space)
                    .map(drop)
            }
            _ => Ok(()),
        });
        // Nobody returns before the manifest is in place.
        self.collective(Node::issue_barrier)?;
        if writer {
            shared.checkpoints.observe(started.elapsed().as_secs_f64());
        }
        outcome
    }

    /// Waits for this worker's operations, then issues its arrival at a collective over every
    /// worker of every node (`issue`) and waits for it.
    fn collective(&self, issue: fn(&mut Node, Time, WorkerId) -> ReqId) -> Result<(), OpError> {
        self.wait_all()?;
        let id = self.owner.id;
        let req = self.shared().with_node(|node, now| issue(node, now, id));
        self.shared().wait_result(id, req).map(drop)
    }
}
