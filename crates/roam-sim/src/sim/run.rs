//! Running: choosing and running the next event (a link's head frame, a worker's next op, a
//! node's due timers), by the seeded RNG or by an explorer's choice.
//!
//! Invariants: an event runs only once its ready time is reached (virtual time jumps to it);
//! timers are events only while some live worker has work left, so a run whose workers are done
//! is idle; after every event the single-copy invariant is checked when configured.

use rand::Rng;
use roam_core::{NodeId, Time};

use super::*;

impl Sim {
    // ----- running ---------------------------------------------------------------------------

    /// Runs one event: advances virtual time to the earliest ready event if none is ready now,
    /// then runs one ready event chosen by the RNG. Returns false, doing nothing, if no event is
    /// pending (held links do not count).
    pub fn step(&mut self) -> bool {
        let mut ready = self.ready_events();
        let Some(earliest) = ready.iter().map(|(t, _)| *t).min() else {
            return false;
        };
        self.now = self.now.max(earliest);
        let now = self.now;
        ready.retain(|(t, _)| *t <= now);
        let pick = if ready.len() == 1 {
            0
        } else {
            self.rng.random_range(0..ready.len())
        };
        self.run_event(ready[pick].1);
        true
    }

    /// Every event that could run next, whatever its ready time: the head of every link that is
    /// not held, and the next op of every worker of a live node that may go on.
    pub fn choices(&self) -> Vec<Choice> {
        let n = self.cfg.nodes as usize;
        self.ready_events()
            .into_iter()
            .map(|(_, e)| match e {
                Event::Link(idx) => Choice::Deliver {
                    from: NodeId((idx / n) as u32),
                    to: NodeId((idx % n) as u32),
                },
                Event::Worker(node, w) => Choice::Run(self.nodes[node].workers[w].id),
                Event::Timer(node) => Choice::Timer(NodeId(node as u32)),
            })
            .collect()
    }

    /// Runs `choice` (one of [`Sim::choices`]), advancing virtual time to its ready time if that
    /// is later. Draws no random number itself.
    ///
    /// # Panics
    /// If `choice` cannot run now.
    pub fn step_choice(&mut self, choice: Choice) {
        let n = self.cfg.nodes as usize;
        let (ready, event) = match choice {
            Choice::Deliver { from, to } => {
                let idx = self.link_index(from, to);
                (self.links[idx].head_ready(), Event::Link(idx))
            }
            Choice::Run(w) => {
                let node = &self.nodes[w.node.index()];
                let ready = if node.crashed {
                    None
                } else {
                    node.workers[w.worker.index()].next_event()
                };
                (ready, Event::Worker(w.node.index(), w.worker.index()))
            }
            Choice::Timer(id) => {
                let node = &self.nodes[id.index()];
                let ready = (!node.crashed).then(|| node.node.poll_timeout()).flatten();
                (ready, Event::Timer(id.index()))
            }
        };
        let Some(ready) = ready else {
            self.internal_error(format!("{choice:?} cannot run now ({n} nodes)"));
        };
        self.now = self.now.max(ready);
        self.run_event(event);
    }

    pub(super) fn ready_events(&self) -> Vec<(Time, Event)> {
        let mut ready: Vec<(Time, Event)> = Vec::new();
        for (idx, link) in self.links.iter().enumerate() {
            if let Some(t) = link.head_ready() {
                ready.push((t, Event::Link(idx)));
            }
        }
        for (n, node) in self.nodes.iter().enumerate().filter(|(_, n)| !n.crashed) {
            for (w, worker) in node.workers.iter().enumerate() {
                if let Some(t) = worker.next_event() {
                    ready.push((t, Event::Worker(n, w)));
                }
            }
        }
        // Timers run while some worker has work left: they exist to unblock waiting workers,
        // and a run whose workers are done is idle whatever heartbeats would still go out.
        if !self.unfinished_workers().is_empty() {
            for (n, node) in self.nodes.iter().enumerate().filter(|(_, n)| !n.crashed) {
                if let Some(t) = node.node.poll_timeout() {
                    ready.push((t, Event::Timer(n)));
                }
            }
        }
        ready
    }

    pub(super) fn run_event(&mut self, event: Event) {
        self.steps += 1;
        match event {
            Event::Link(idx) => self.deliver(idx),
            Event::Worker(n, w) => self.run_worker(n, w),
            Event::Timer(n) => self.run_timers(n),
        }
        if self.cfg.check_invariants
            && let Err(message) = self.check_single_copy()
        {
            self.internal_error(message);
        }
    }

    /// Runs node `n`'s due timers.
    pub(super) fn run_timers(&mut self, n: usize) {
        let id = NodeId(n as u32);
        self.trace.event(self.now.0, TAG_TIMER, &[n as u64], &[]);
        self.inputs[n].bytes(&[TAG_TIMER]);
        self.inputs[n].u64(self.now.0);
        let before = self.lost_by(id);
        self.nodes[n].node.handle_timeout(self.now);
        self.note_losses(id, &before, None);
        self.drain(id);
    }

    /// Runs events until none is pending; fails if that takes more than
    /// [`SimConfig::max_steps`]. Returns the steps taken. Ops waiting on held links or crashed
    /// nodes may remain pending: see [`Sim::unfinished_workers`].
    pub fn run_until_idle(&mut self) -> Result<u64, SimError> {
        let start = self.steps;
        while self.step() {
            if self.steps - start >= self.cfg.max_steps {
                return Err(SimError::StepLimit {
                    seed: self.cfg.seed,
                    steps: self.steps - start,
                    now: self.now,
                });
            }
        }
        Ok(self.steps - start)
    }

    /// Runs at most `n` events; returns how many ran (fewer if the simulation became idle).
    pub fn run_steps(&mut self, n: u64) -> u64 {
        (0..n).take_while(|_| self.step()).count() as u64
    }
}
