//! Intent signaling (the `adapm` mode, AdaPM), shared by the workloads: how far ahead each
//! signals, and what the report says about it.
//!
//! In `adapm` mode a workload never calls `localize` and names no replicated key. Each worker
//! ticks its clock ([`roam::Worker::advance_clock`]) once per unit of its data — a batch of
//! sentences (w2v), a triple (kge), a chunk of ratings (mf) — and signals ahead of time which
//! keys that unit will access, with `start` the clock at which the unit will be processed and
//! `end = start + 1` ([`roam::Worker::intent`]); roam brings the keys here shortly before
//! `start`, by a window it measures. How far ahead (fixed per app, in data, after AdaPM's apps):
//! - kge: [`KGE_AHEAD_TRIPLES`] triples of the worker's epoch order;
//! - w2v: [`W2V_AHEAD_WORDS`] words of the worker's part, in whole batches;
//! - mf: each sub-epoch's column block when the sub-epoch starts, as AdaPM's DSGD does (the
//!   previous user works on it until the barrier before; the row block once, for the whole
//!   run).
//!
//! Negatives (kge, w2v) are drawn when their data point's intent is signalled, from the same
//! registered sampler as in the other modes under the `naive` scheme (which neither moves keys
//! nor changes the distribution), and named in the intent; at use time they are read with
//! ordinary pulls. Under `--sampling local` (AdaPM's "local sampling") they are not: the
//! intent names the data point's own keys only, and the negatives are drawn at use time from
//! the keys held on the node ([`crate::sampling::draws_ahead`]).
//!
//! The report: every worker's counters ([`roam_core::stats::WorkerCounters`]: intents, their
//! keys, the keys acted on, late intents, unchecked ones) and its current action window,
//! summed over the cluster through the apps' exact sums ([`crate::common::SumKeys`]).

use std::sync::Mutex;
use std::sync::atomic::Ordering::Relaxed;

use roam::Worker;
use serde_json::{Value, json};

/// Triples a kge worker signals ahead (AdaPM's `signal_intent_ahead` default).
pub const KGE_AHEAD_TRIPLES: usize = 1000;

/// Words a w2v worker signals ahead: AdaPM's word2vec reads 1000–2000 sentences ahead
/// (`read_sentences_ahead`), about 25 words each on its corpus (the One Billion Word
/// benchmark); roam's unit is a batch of sentences, so this is rounded up to whole batches.
pub const W2V_AHEAD_WORDS: usize = 50_000;

/// When the keys that the adapm modes share are synchronised (roam's defaults unless given).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ShareOptions {
    /// adapm modes: the longest time between two share-sync rounds, in milliseconds (roam's
    /// default: 100; without a work clock, the time between rounds).
    #[arg(long, value_name = "MS")]
    pub share_sync_every_ms: Option<f64>,
    /// adapm modes: a share-sync round starts once a node pushed this many keys per key shared
    /// there since the last one (roam's default: 2; 0: rounds by time only).
    #[arg(long, value_name = "N")]
    pub share_sync_updates_per_key: Option<u64>,
}

impl ShareOptions {
    /// Checks the values.
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(ms) = self.share_sync_every_ms {
            anyhow::ensure!(
                ms.is_finite() && ms > 0.0 && ms <= 3.6e6,
                "--share-sync-every-ms must be a number of milliseconds above 0 and at most an \
                 hour; got {ms}"
            );
        }
        Ok(())
    }

    /// Sets `cfg`'s share-sync period and work clock where given.
    pub fn configure(&self, cfg: &mut roam::Config) {
        if let Some(ms) = self.share_sync_every_ms {
            cfg.share_sync_every = std::time::Duration::from_secs_f64(ms / 1e3);
        }
        if let Some(per_key) = self.share_sync_updates_per_key {
            cfg.share_sync_updates_per_key = per_key;
        }
    }
}

/// Counters per worker: intents, intent keys, intent actions, late intents, unchecked
/// intents, and the action window.
pub const COUNTERS: usize = 6;

/// Window values are capped at this before summing (the `Immediate` ablation's is `u64::MAX`).
const WINDOW_CAP: u64 = u32::MAX as u64;

/// `worker`'s intent counters so far and its action window now.
pub fn worker_counts(worker: &Worker) -> [u64; COUNTERS] {
    let c = worker.counters();
    [
        c.intents.load(Relaxed),
        c.intent_keys.load(Relaxed),
        c.intent_actions.load(Relaxed),
        c.late_intents.load(Relaxed),
        c.intents_unchecked.load(Relaxed),
        worker.intent_window().min(WINDOW_CAP),
    ]
}

/// The counts of `now` since `before` (the window is `now`'s, not a difference).
pub fn since(now: [u64; COUNTERS], before: &[u64; COUNTERS]) -> [u64; COUNTERS] {
    let mut out = now;
    for (o, b) in out.iter_mut().zip(before).take(COUNTERS - 1) {
        *o = o.saturating_sub(*b);
    }
    out
}

/// The report's `intents` object from counts summed over `workers` workers: the five
/// counters, the fraction of intents that were late, and the mean window over the workers.
pub fn report(sums: &[u64], workers: u64) -> Value {
    let (intents, late) = (sums[0], sums[3]);
    json!({
        "intents": intents,
        "intent_keys": sums[1],
        "intent_actions": sums[2],
        "late_intents": late,
        "intents_unchecked": sums[4],
        "late_fraction": if intents > 0 { late as f64 / intents as f64 } else { 0.0 },
        "window_mean": sums[5] as f64 / workers.max(1) as f64,
    })
}

/// One node's workers' counts, added up before the node's contribution to the cluster sums.
#[derive(Debug, Default)]
pub struct NodeIntents(Mutex<[u64; COUNTERS]>);

impl NodeIntents {
    /// Adds one worker's counts.
    pub fn add(&self, counts: &[u64; COUNTERS]) {
        let mut acc = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (a, c) in acc.iter_mut().zip(counts) {
            *a += c;
        }
    }

    /// Takes the node's totals and resets them.
    pub fn take(&self) -> [u64; COUNTERS] {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_counts_are_differences_but_the_window_is_current() {
        let before = [10, 100, 50, 2, 0, 7];
        let now = [15, 160, 70, 3, 1, 9];
        assert_eq!(since(now, &before), [5, 60, 20, 1, 1, 9]);
    }

    #[test]
    fn the_report_names_every_counter_and_averages_the_window() {
        let r = report(&[8, 80, 40, 2, 0, 30], 2);
        assert_eq!(r["intents"], 8);
        assert_eq!(r["intent_keys"], 80);
        assert_eq!(r["intent_actions"], 40);
        assert_eq!(r["late_intents"], 2);
        assert_eq!(r["intents_unchecked"], 0);
        assert_eq!(r["late_fraction"], 0.25);
        assert_eq!(r["window_mean"], 15.0);
        assert_eq!(report(&[0; COUNTERS], 0)["late_fraction"], 0.0);
    }

    #[test]
    fn node_totals_add_up_and_reset() {
        let node = NodeIntents::default();
        node.add(&[1, 2, 3, 4, 5, 6]);
        node.add(&[1, 1, 1, 1, 1, 1]);
        assert_eq!(node.take(), [2, 3, 4, 5, 6, 7]);
        assert_eq!(node.take(), [0; COUNTERS]);
    }
}
