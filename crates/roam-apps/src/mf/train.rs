//! One worker's DSGD: the chunk pipeline over a block, the SGD step, evaluation, and the
//! lapse-mode localization of parameter blocks.
//!
//! Within a sub-epoch a worker owns its row block and its column block exclusively (see
//! `schedule`), so it may hold copies of those parameters without any staleness. A block's
//! points are processed in chunks: the chunk's distinct keys are pulled in one batch, plain
//! sequential SGD runs over the chunk on the pulled copies, and the accumulated deltas are
//! pushed back. To hide latency the pull of chunk `k+1` is issued before chunk `k` is
//! computed; the keys chunk `k+1` shares with chunk `k` are then stale, so they are patched
//! from chunk `k`'s final values ("carry"). The pull of chunk `k+1` is issued only after the
//! push of chunk `k-1` has completed, so every key not carried is read after all earlier
//! writes. Hence the result is exactly sequential SGD in the block's order, whatever the
//! chunk size and wherever the keys live: the mode changes placement and speed, never the
//! math. (Pushes are additive deltas, so the order in which the store applies them does not
//! matter either.)
//!
//! In lapse mode a worker localizes its row block once at the start and each column block
//! when its sub-epoch starts, without waiting; with `--prefetch-at F` it also localizes the
//! next sub-epoch's column block once it has processed the fraction F of the current block.
//!
//! In adapm mode a worker localizes nothing: it signals intents, and its clock ticks once per
//! chunk and once more after each sub-epoch's barrier. At the start it signals its row block
//! for the whole run; when a sub-epoch starts (after the barrier) it signals the sub-epoch's
//! column block from the current clock to the clock of its last chunk, as AdaPM's own DSGD
//! does. The block's previous user ended its intent with its last chunk, before the barrier,
//! so the block's owner has no use of it left and moves it here. Signalled a sub-epoch ahead
//! instead (roam until 2026-11-29), the intent was acted on while the previous user still
//! worked on the block, and its end could not be predicted across the barrier (the workers'
//! blocks differ in size, and each waits for the slowest): owners shared blocks instead of
//! moving them, at 1.7× the CPU of this schedule (docs/benchmarks.md, "MF under adapm").
//!
//! In the NuPS modes the hot columns are replicated: they are left out of every localize
//! (they are local everywhere), and a sub-epoch ends with `sync_replicas` instead of a barrier,
//! so the worker that takes a column block over sees all updates to its replicated columns.
//! Within a sub-epoch only one worker touches a column, and its own pushes are in its node's
//! replica at once, so the pipeline above stays exact.

use anyhow::Context;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use roam::{Key, Ticket, Worker};

use super::schedule::{self, Split};
use super::synthetic::normal;

/// One training point inside a block: row and column positions within their blocks, and the
/// value minus the global training mean.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Position of the row in the worker's row block.
    pub w: u32,
    /// Position of the column in its column block.
    pub h: u32,
    /// Centered value.
    pub r: f32,
}

/// The key layout and blocking shared (read-only) by all workers of a node.
#[derive(Debug)]
pub struct Layout {
    /// Factor dimension (values per key).
    pub dim: usize,
    /// Number of workers in the cluster (= blocks per dimension).
    pub parts: u32,
    /// Row blocks.
    pub rows: Split,
    /// Column blocks.
    pub cols: Split,
    /// Keys of each row block, in local order (W row `i` is key `i`).
    pub w_keys: Vec<Vec<Key>>,
    /// Keys of each column block, in local order (H column `j` is key `rows + j`).
    pub h_keys: Vec<Vec<Key>>,
    /// Keys of each column block that localizing moves: all but the replicated ones.
    pub h_moving: Vec<Vec<Key>>,
}

impl Layout {
    /// Blocks `rows × cols` for `parts` workers.
    pub fn new(rows: u32, cols: u32, dim: usize, parts: u32, seed: u64) -> Self {
        let row_split = Split::new(rows, parts, seed ^ 0x000a_110c_47e5);
        let col_split = Split::new(cols, parts, seed ^ 0xc015_b10c);
        let w_keys = row_split
            .members
            .iter()
            .map(|m| m.iter().map(|&i| Key::from(i)).collect())
            .collect();
        let h_keys: Vec<Vec<Key>> = col_split
            .members
            .iter()
            .map(|m| m.iter().map(|&j| u64::from(rows) + Key::from(j)).collect())
            .collect();
        Self {
            dim,
            parts,
            rows: row_split,
            cols: col_split,
            h_moving: h_keys.clone(),
            w_keys,
            h_keys,
        }
    }

    /// Leaves the `replicated` keys (sorted) out of the blocks that localizing moves.
    pub fn keep_local(&mut self, replicated: &[Key]) {
        for (moving, all) in self.h_moving.iter_mut().zip(&self.h_keys) {
            *moving = all
                .iter()
                .copied()
                .filter(|k| replicated.binary_search(k).is_err())
                .collect();
        }
    }
}

/// A worker's data: its row block's points, grouped by column block.
#[derive(Debug, Default)]
pub struct WorkerData {
    /// Training points of block `(p, q)` at index `q`.
    pub train: Vec<Vec<Point>>,
    /// Test points of block `(p, q)` at index `q`.
    pub test: Vec<Vec<Point>>,
}

/// Hyper-parameters a worker needs.
#[derive(Clone, Copy, Debug)]
pub struct Hyper {
    /// L2 weight per point.
    pub lambda: f32,
    /// Points per pull/push batch.
    pub chunk: usize,
    /// Localize parameters (lapse and nups modes).
    pub localize: bool,
    /// Hot columns are replicated (nups modes): sub-epochs end with `sync_replicas`.
    pub replicated: bool,
    /// Fraction of a block after which the next column block is localized (lapse mode).
    pub prefetch_at: Option<f64>,
    /// Signal intents instead of localizing, one clock tick per chunk (adapm mode).
    pub intents: bool,
    /// Seed of the point order.
    pub seed: u64,
    /// Standard deviation of the initial factors.
    pub init_sd: f32,
}

/// Losses of one pass, summed over points.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Loss {
    /// Sum of squared errors.
    pub sse: f64,
    /// Sum of the L2 terms `λ(|w|² + |h|²)`.
    pub reg: f64,
    /// Points.
    pub points: u64,
}

/// The distinct keys of a chunk, their values, and each point's slots.
#[derive(Debug)]
struct Batch {
    keys: Vec<Key>,
    ids: Vec<u32>,
    vals: Vec<f32>,
    orig: Vec<f32>,
    pts: Vec<(u32, u32, f32)>,
    /// `(slot here, slot in the previous chunk)` of the keys both chunks hold.
    carry: Vec<(u32, u32)>,
    /// `(generation, slot)` by local id: the slot is valid where the generation is current
    /// (one array, so a lookup touches one cache line).
    slot_of: Vec<(u32, u32)>,
    generation: u32,
}

impl Batch {
    fn new(ids: usize) -> Self {
        Self {
            keys: Vec::new(),
            ids: Vec::new(),
            vals: Vec::new(),
            orig: Vec::new(),
            pts: Vec::new(),
            carry: Vec::new(),
            slot_of: vec![(0, 0); ids],
            generation: 0,
        }
    }

    #[inline]
    fn slot(&self, id: u32) -> Option<u32> {
        let (generation, slot) = self.slot_of[id as usize];
        (generation == self.generation).then_some(slot)
    }

    /// Collects the distinct keys of `points` (row block keys `w_keys`, column block keys
    /// `h_keys`; local ids are row positions, then `w_keys.len()` + column positions).
    fn prepare(
        &mut self,
        points: &[Point],
        w_keys: &[Key],
        h_keys: &[Key],
        dim: usize,
        prev: Option<&Self>,
    ) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.slot_of.fill((0, 0));
            self.generation = 1;
        }
        self.keys.clear();
        self.ids.clear();
        self.pts.clear();
        self.carry.clear();
        let offset = w_keys.len() as u32;
        for pt in points {
            let ws = self.slot_for(pt.w, w_keys[pt.w as usize], prev);
            let hs = self.slot_for(offset + pt.h, h_keys[pt.h as usize], prev);
            self.pts.push((ws, hs, pt.r));
        }
        self.vals.resize(self.keys.len() * dim, 0.0);
    }

    #[inline]
    fn slot_for(&mut self, id: u32, key: Key, prev: Option<&Self>) -> u32 {
        if let Some(slot) = self.slot(id) {
            return slot;
        }
        let slot = self.keys.len() as u32;
        self.slot_of[id as usize] = (self.generation, slot);
        self.keys.push(key);
        self.ids.push(id);
        if let Some(theirs) = prev.and_then(|p| p.slot(id)) {
            self.carry.push((slot, theirs));
        }
        slot
    }

    /// Overwrites the carried keys with `prev`'s final values and remembers the values the
    /// deltas will be taken against.
    fn patch(&mut self, prev: &Self, dim: usize) {
        for &(mine, theirs) in &self.carry {
            let (m, t) = (mine as usize * dim, theirs as usize * dim);
            self.vals[m..m + dim].copy_from_slice(&prev.vals[t..t + dim]);
        }
        self.orig.clear();
        self.orig.extend_from_slice(&self.vals);
    }

    /// Turns `orig` into the deltas `vals - orig` (to push).
    fn deltas(&mut self) {
        for (o, v) in self.orig.iter_mut().zip(&self.vals) {
            *o = v - *o;
        }
    }
}

/// The two vectors of a point, mutably (slots `a != b`).
fn pair_mut(vals: &mut [f32], a: usize, b: usize, dim: usize) -> (&mut [f32], &mut [f32]) {
    debug_assert_ne!(a, b);
    if a < b {
        let (lo, hi) = vals.split_at_mut(b * dim);
        (&mut lo[a * dim..a * dim + dim], &mut hi[..dim])
    } else {
        let (lo, hi) = vals.split_at_mut(a * dim);
        (&mut hi[..dim], &mut lo[b * dim..b * dim + dim])
    }
}

/// Sequential SGD over the points of a batch on squared loss plus per-point L2; returns the
/// loss measured before each point's update.
fn sgd(batch: &mut Batch, dim: usize, lr: f32, lambda: f32) -> Loss {
    let mut loss = Loss {
        points: batch.pts.len() as u64,
        ..Loss::default()
    };
    for &(ws, hs, r) in &batch.pts {
        let (w, h) = pair_mut(&mut batch.vals, ws as usize, hs as usize, dim);
        let (mut dot, mut nw, mut nh) = (0f32, 0f32, 0f32);
        for (a, b) in w.iter().zip(h.iter()) {
            dot += a * b;
            nw += a * a;
            nh += b * b;
        }
        let err = r - dot;
        loss.sse += f64::from(err * err);
        loss.reg += f64::from(lambda * (nw + nh));
        for (a, b) in w.iter_mut().zip(h.iter_mut()) {
            let (wa, hb) = (*a, *b);
            *a = wa + lr * (err * hb - lambda * wa);
            *b = hb + lr * (err * wa - lambda * hb);
        }
    }
    loss
}

/// The initial value of `key`: a function of the seed and the key only, so every mode and
/// cluster shape starts from the same factors.
pub fn initial_values(seed: u64, key: Key, sd: f32, out: &mut [f32]) {
    let mut rng =
        SmallRng::seed_from_u64(seed ^ key.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x0141_71a1);
    for v in out {
        *v = sd * normal(&mut rng) as f32;
    }
}

/// Points per batch of an evaluation pass (read-only, so larger batches are fine).
const EVAL_CHUNK: usize = 1 << 16;
/// Keys per batch when initialising parameters.
const INIT_BATCH: usize = 4096;

/// One worker's training state.
pub struct Trainer<'a> {
    worker: &'a Worker,
    layout: &'a Layout,
    data: WorkerData,
    hyper: Hyper,
    p: u32,
    a: Batch,
    b: Batch,
}

impl<'a> Trainer<'a> {
    /// A trainer for `worker` (global id = its block index) over `data`.
    pub fn new(worker: &'a Worker, layout: &'a Layout, data: WorkerData, hyper: Hyper) -> Self {
        let p = worker.global_id();
        let ids = layout.rows.members[p as usize].len() + layout.cols.max_block();
        Self {
            worker,
            layout,
            data,
            hyper,
            p,
            a: Batch::new(ids),
            b: Batch::new(ids),
        }
    }

    /// Training points of this worker.
    pub fn train_points(&self) -> u64 {
        self.data.train.iter().map(|b| b.len() as u64).sum()
    }

    /// Localizes `keys` without waiting (lapse mode only), keeping the ticket until the next
    /// barrier so that it is not waited on drop.
    fn localize(&self, keys: &[Key], tickets: &mut Vec<Ticket<'a>>) -> anyhow::Result<()> {
        if self.hyper.localize && !keys.is_empty() {
            tickets.push(
                self.worker
                    .localize(keys)
                    .context("localizing parameters")?,
            );
        }
        Ok(())
    }

    /// Clock ticks (chunks) of this worker's block `(p, q)`.
    fn chunks_of(&self, q: u32) -> u64 {
        self.data.train[q as usize]
            .len()
            .div_ceil(self.hyper.chunk.max(1)) as u64
    }

    /// Signals (adapm mode) that column block `q` will be accessed from clock `start` on, for
    /// as many clocks as it has chunks.
    fn intend_block(&self, q: u32, start: u64) -> anyhow::Result<()> {
        let keys = &self.layout.h_moving[q as usize];
        if self.hyper.intents && !keys.is_empty() {
            let end = start + self.chunks_of(q).max(1);
            self.worker
                .intent(keys, start, end)
                .context("signalling a column block's intent")?;
        }
        Ok(())
    }

    /// Localizes the row block and the first column block (lapse), or signals the intent for
    /// the row block (adapm: each column block is signalled when its sub-epoch starts), then
    /// sets the initial values of this worker's row block and of column block `p` (each block
    /// has exactly one initialising worker). Ends with a barrier.
    pub fn init(&self, set_values: bool) -> anyhow::Result<()> {
        let (p, layout) = (self.p as usize, self.layout);
        let mut tickets = Vec::new();
        self.localize(&layout.w_keys[p], &mut tickets)?;
        let first = schedule::column_block(
            self.p,
            schedule::stratum_order(self.hyper.seed, 0, layout.parts)[0],
            layout.parts,
        );
        self.localize(&layout.h_moving[first as usize], &mut tickets)?;
        if self.hyper.intents && !layout.w_keys[p].is_empty() {
            // The row block is this worker's for the whole run.
            let now = self.worker.current_clock();
            self.worker
                .intent(&layout.w_keys[p], now, u64::MAX)
                .context("signalling the row block's intent")?;
        }
        let dim = layout.dim;
        let mut vals = Vec::new();
        let initial: &[&Vec<Key>] = if set_values {
            &[&layout.w_keys[p], &layout.h_keys[p]]
        } else {
            &[]
        };
        for keys in initial {
            for batch in keys.chunks(INIT_BATCH) {
                vals.resize(batch.len() * dim, 0.0);
                for (key, out) in batch.iter().zip(vals.chunks_mut(dim)) {
                    initial_values(self.hyper.seed, *key, self.hyper.init_sd, out);
                }
                self.worker
                    .set(batch, &vals)?
                    .wait()
                    .context("setting initial factors")?;
            }
        }
        self.worker
            .barrier()
            .context("barrier after initialisation")?;
        if self.hyper.replicated {
            // Replicated columns were set at their hubs: bring them to every replica.
            self.worker
                .sync_replicas()
                .context("syncing replicas after initialisation")?;
        }
        drop(tickets);
        Ok(())
    }

    /// Shuffles block `q`'s points for `epoch`, from the order the previous epoch left.
    fn shuffle(&self, points: &mut [Point], epoch: u32, q: u32) {
        let mut rng = SmallRng::seed_from_u64(
            self.hyper.seed ^ (u64::from(epoch) << 40) ^ (u64::from(self.p) << 20) ^ u64::from(q),
        );
        points.shuffle(&mut rng);
    }

    /// A resumed run: puts every block's points in the order epochs `0..epochs` left them
    /// (each epoch shuffles the previous order), so that later epochs see the points in the
    /// uninterrupted run's order.
    pub fn replay_shuffles(&mut self, epochs: u32) {
        let parts = self.layout.parts;
        for epoch in 0..epochs {
            for &s in &schedule::stratum_order(self.hyper.seed, epoch, parts) {
                let q = schedule::column_block(self.p, s, parts);
                let mut points = std::mem::take(&mut self.data.train[q as usize]);
                self.shuffle(&mut points, epoch, q);
                self.data.train[q as usize] = points;
            }
        }
    }

    /// One epoch: `P` sub-epochs, each ending with a barrier (with `sync_replicas` in the
    /// NuPS modes). `tick` is called after each chunk with its number of points (progress).
    pub fn epoch(
        &mut self,
        epoch: u32,
        lr: f32,
        mut tick: impl FnMut(u64),
    ) -> anyhow::Result<Loss> {
        let parts = self.layout.parts;
        let order = schedule::stratum_order(self.hyper.seed, epoch, parts);
        let mut total = Loss::default();
        for (t, &s) in order.iter().enumerate() {
            let q = schedule::column_block(self.p, s, parts);
            let next = schedule::next_column_block(self.hyper.seed, epoch, t as u32, self.p, parts);
            let mut tickets = Vec::new();
            self.localize(&self.layout.h_moving[q as usize], &mut tickets)?;
            self.intend_block(q, self.worker.current_clock())?;
            let mut points = std::mem::take(&mut self.data.train[q as usize]);
            self.shuffle(&mut points, epoch, q);
            let result = self.block(&points, (q, next), lr, &mut tickets, &mut tick);
            self.data.train[q as usize] = points;
            let loss = result?;
            total.sse += loss.sse;
            total.reg += loss.reg;
            total.points += loss.points;
            if self.hyper.replicated {
                // A collective like the barrier (every worker waits for its operations and
                // then for all others), which also brings every push to every replica.
                self.worker
                    .sync_replicas()
                    .context("syncing replicas after a sub-epoch")?;
            } else {
                self.worker.barrier().context("barrier after a sub-epoch")?;
            }
            if self.hyper.intents {
                self.worker.advance_clock();
            }
            drop(tickets);
        }
        Ok(total)
    }

    /// Runs the chunk pipeline over `points` of block `(p, q)`; `next` is the next block.
    fn block(
        &mut self,
        points: &[Point],
        (q, next): (u32, u32),
        lr: f32,
        tickets: &mut Vec<Ticket<'a>>,
        tick: &mut dyn FnMut(u64),
    ) -> anyhow::Result<Loss> {
        let mut total = Loss::default();
        if points.is_empty() {
            return Ok(total);
        }
        let (layout, worker, hyper) = (self.layout, self.worker, self.hyper);
        let dim = layout.dim;
        let w_keys = &layout.w_keys[self.p as usize];
        let h_keys = &layout.h_keys[q as usize];
        let chunks: Vec<&[Point]> = points.chunks(hyper.chunk).collect();
        let prefetch_after = hyper
            .prefetch_at
            .map(|f| (f * points.len() as f64).ceil() as usize);
        let mut prefetched = !hyper.localize || next == q;
        let (mut cur, mut nxt) = (&mut self.a, &mut self.b);
        cur.prepare(chunks[0], w_keys, h_keys, dim, None);
        worker
            .pull(&cur.keys, &mut cur.vals)?
            .wait()
            .context("pulling factors")?;

        cur.orig.clear();
        cur.orig.extend_from_slice(&cur.vals);
        let mut pending: Option<Ticket<'a>> = None;
        let mut done = 0;
        for k in 0..chunks.len() {
            if let Some(push) = pending.take() {
                push.wait().context("pushing factor updates")?;
            }
            let ahead = if k + 1 < chunks.len() {
                nxt.prepare(chunks[k + 1], w_keys, h_keys, dim, Some(&*cur));
                Some(worker.pull(&nxt.keys, &mut nxt.vals)?)
            } else {
                None
            };
            let loss = sgd(cur, dim, lr, hyper.lambda);
            total.sse += loss.sse;
            total.reg += loss.reg;
            total.points += loss.points;
            cur.deltas();
            pending = Some(worker.push(&cur.keys, &cur.orig)?);
            // Consuming `ahead` whole (not by pattern) ends its borrow of `nxt` here.
            let pulled = ahead
                .map(Ticket::wait)
                .transpose()
                .context("pulling factors")?
                .is_some();

            if pulled {
                nxt.patch(cur, dim);
            }
            std::mem::swap(&mut cur, &mut nxt);
            done += chunks[k].len();
            tick(chunks[k].len() as u64);
            if hyper.intents {
                worker.advance_clock();
            }
            if !prefetched && prefetch_after.is_some_and(|at| done >= at) {
                prefetched = true;
                if hyper.localize && !layout.h_moving[next as usize].is_empty() {
                    tickets.push(
                        worker
                            .localize(&layout.h_moving[next as usize])
                            .context("prefetching a block")?,
                    );
                }
            }
        }
        if let Some(push) = pending {
            push.wait().context("pushing factor updates")?;
        }
        Ok(total)
    }

    /// Squared errors of the current model on this worker's training or test points (call
    /// between barriers, when no worker writes).
    pub fn evaluate(&mut self, test: bool) -> anyhow::Result<Loss> {
        let (layout, worker) = (self.layout, self.worker);
        let dim = layout.dim;
        let w_keys = &layout.w_keys[self.p as usize];
        let blocks = if test {
            &self.data.test
        } else {
            &self.data.train
        };
        let mut total = Loss::default();
        for (q, points) in blocks.iter().enumerate() {
            for chunk in points.chunks(EVAL_CHUNK) {
                let batch = &mut self.a;
                batch.prepare(chunk, w_keys, &layout.h_keys[q], dim, None);
                worker
                    .pull(&batch.keys, &mut batch.vals)?
                    .wait()
                    .context("pulling factors for evaluation")?;
                for &(ws, hs, r) in &batch.pts {
                    let (w, h) = (
                        &batch.vals[ws as usize * dim..][..dim],
                        &batch.vals[hs as usize * dim..][..dim],
                    );
                    let err = r - w.iter().zip(h).map(|(a, b)| a * b).sum::<f32>();
                    total.sse += f64::from(err * err);
                }
                total.points += chunk.len() as u64;
            }
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(n: usize, rows: u32, cols: u32, seed: u64) -> Vec<Point> {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..n)
            .map(|_| Point {
                w: rand::Rng::random_range(&mut rng, 0..rows),
                h: rand::Rng::random_range(&mut rng, 0..cols),
                r: rand::Rng::random::<f32>(&mut rng),
            })
            .collect()
    }

    /// Runs the carry logic alone (no parameter server): chunked with patching must equal
    /// one big batch, i.e. plain sequential SGD.
    fn chunked(points: &[Point], rows: u32, cols: u32, chunk: usize, dim: usize) -> Vec<f32> {
        let w_keys: Vec<Key> = (0..u64::from(rows)).collect();
        let h_keys: Vec<Key> = (0..u64::from(cols)).map(|j| u64::from(rows) + j).collect();
        let mut store = vec![0f32; (rows + cols) as usize * dim];
        for (k, out) in store.chunks_mut(dim).enumerate() {
            initial_values(3, k as Key, 0.3, out);
        }
        let ids = (rows + cols) as usize;
        let (mut cur, mut nxt) = (Batch::new(ids), Batch::new(ids));
        let chunks: Vec<&[Point]> = points.chunks(chunk).collect();
        let pull = |b: &mut Batch, store: &[f32]| {
            for (s, &key) in b.keys.iter().enumerate() {
                b.vals[s * dim..][..dim].copy_from_slice(&store[key as usize * dim..][..dim]);
            }
        };
        cur.prepare(chunks[0], &w_keys, &h_keys, dim, None);
        pull(&mut cur, &store);
        cur.orig = cur.vals.clone();
        for k in 0..chunks.len() {
            let ahead = k + 1 < chunks.len();
            if ahead {
                nxt.prepare(chunks[k + 1], &w_keys, &h_keys, dim, Some(&cur));
                // Pulled before this chunk's push lands: stale for carried keys.
                pull(&mut nxt, &store);
            }
            sgd(&mut cur, dim, 0.05, 0.01);
            cur.deltas();
            for (s, &key) in cur.keys.iter().enumerate() {
                for d in 0..dim {
                    store[key as usize * dim + d] += cur.orig[s * dim + d];
                }
            }
            if ahead {
                nxt.patch(&cur, dim);
            }
            std::mem::swap(&mut cur, &mut nxt);
        }
        store
    }

    #[test]
    fn chunked_pipeline_equals_sequential_sgd() {
        let (rows, cols, dim) = (30, 20, 4);
        let pts = points(2000, rows, cols, 9);
        let whole = chunked(&pts, rows, cols, pts.len(), dim);
        for chunk in [1, 7, 64, 500] {
            let got = chunked(&pts, rows, cols, chunk, dim);
            let worst = got
                .iter()
                .zip(&whole)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-4, "chunk {chunk}: differs by {worst}");
        }
    }

    #[test]
    fn sgd_reduces_the_error_of_one_point() {
        let mut b = Batch::new(2);
        b.prepare(&[Point { w: 0, h: 0, r: 1.0 }], &[0], &[1], 3, None);
        b.vals.copy_from_slice(&[0.1, 0.2, 0.3, 0.3, 0.2, 0.1]);
        let first = sgd(&mut b, 3, 0.1, 0.0);
        let second = sgd(&mut b, 3, 0.1, 0.0);
        assert!(second.sse < first.sse);
        assert_eq!(first.points, 1);
    }
}
