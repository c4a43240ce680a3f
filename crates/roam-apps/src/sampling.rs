//! Negative sampling through roam's sampling API, shared by the workloads that draw negatives
//! (KGE and word vectors): the `--sampling` option, its default per mode, and the report of
//! what the sampler did.
//!
//! Every mode draws its negatives through a registered sampler; the modes differ in the scheme:
//! - `single`, `classic`, `classic-nolocal`, `nups-replicate-only`: `naive` (keys never move,
//!   so `preloc` and `pool` would only add work);
//! - `lapse`: `preloc` (Lapse's technique: negatives drawn ahead and localized);
//! - `nups`: the app's measured best trade-off ([`default_scheme`]: `local` for word vectors,
//!   `preloc` for KGE; numbers in docs/benchmarks.md, "Sampling");
//! - `adapm`: `naive` by default: the negatives of a data point are drawn when its intent is
//!   signalled and named in it, so roam moves them by intent. `local` and `local:next` are
//!   accepted too (AdaPM's own KGE setup, "local sampling"): the intents then name the data
//!   point's own keys only, and the negatives are drawn at training time from the keys held
//!   here, with no intent and no communication, at the price of their distribution
//!   ([`draws_ahead`]). `preloc` and `pool` are refused ([`check_scheme`]): they would move the
//!   negatives a second way, beside the intents.

use anyhow::ensure;
use roam::Scheme;
use roam_core::stats::WorkerCounters;
use serde_json::{Value, json};

use crate::common::Mode;

/// The app that samples (its defaults differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum App {
    /// Knowledge-graph embeddings: uniform negative entities.
    Kge,
    /// Word vectors: negatives from unigram^0.75.
    W2v,
}

/// Parses `--sampling` (clap value parser).
pub fn parse_scheme(s: &str) -> Result<Scheme, String> {
    s.parse::<Scheme>().map_err(|e| e.to_string())
}

/// The scheme a mode uses unless `--sampling` names one.
pub fn default_scheme(app: App, mode: Mode) -> Scheme {
    match mode {
        Mode::Lapse => Scheme::Preloc,
        // The measured trade-offs (docs/benchmarks.md, "Sampling"): for word vectors `local`
        // cost the least and learned as well; for KGE it cost 1.4× less than `preloc` on the
        // suite's graph but lost 0.08 MRR on lapse-toy at 4 nodes, and `pool:16` stalled.
        Mode::Nups => match app {
            App::W2v => Scheme::Local { next: false },
            App::Kge => Scheme::Preloc,
        },
        Mode::Single
        | Mode::Classic
        | Mode::ClassicNolocal
        | Mode::NupsReplicateOnly
        | Mode::Adapm
        | Mode::AdapmRelocateOnly
        | Mode::AdapmReplicateOnly => Scheme::Naive,
    }
}

/// Refuses a scheme the mode cannot use: `adapm` either draws its negatives ahead under
/// `naive` and signals intents for them, or draws them at training time from its local keys
/// (`local`); `preloc` and `pool` would move keys beside the intents.
pub fn check_scheme(mode: Mode, scheme: Scheme) -> anyhow::Result<()> {
    ensure!(
        !mode.signals_intents() || matches!(scheme, Scheme::Naive | Scheme::Local { .. }),
        "--sampling {scheme}: mode adapm either draws its negatives when it signals their intent \
         (naive, moved by the intent) or from the keys held here (local, local:next, no \
         intent); {scheme} would move them beside the intents, so it takes only --sampling \
         naive, local or local:next"
    );
    Ok(())
}

/// Whether a mode that signals intents draws a data point's negatives when it signals the
/// point's intent (and names them in it): under `naive`. Under `local` they are drawn when
/// the point trains, from the keys held here then, and no intent names them.
pub fn draws_ahead(scheme: Scheme) -> bool {
    !matches!(scheme, Scheme::Local { .. })
}

/// The scheme of a run: `chosen`, or the mode's default.
pub fn resolve(app: App, mode: Mode, chosen: Option<Scheme>) -> Scheme {
    chosen.unwrap_or_else(|| default_scheme(app, mode))
}

/// Samples drawn and local-scheme fallbacks of one worker so far (for the per-epoch sums).
pub fn worker_counts(counters: &WorkerCounters) -> [u64; 2] {
    use std::sync::atomic::Ordering::Relaxed;
    [
        counters.sampled_keys.load(Relaxed),
        counters.sample_fallbacks.load(Relaxed),
    ]
}

/// The report's `sampling` object: the scheme and, from the summed counts, the samples drawn
/// and the fraction of `local` samples that found no local key.
pub fn report(scheme: Scheme, sampled: u64, fallbacks: u64) -> Value {
    json!({
        "scheme": scheme.to_string(),
        "samples": sampled,
        "fallback_fraction": if sampled > 0 { fallbacks as f64 / sampled as f64 } else { 0.0 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapm_draws_naive_or_local_and_refuses_the_schemes_that_move_negatives() {
        for app in [App::Kge, App::W2v] {
            assert_eq!(default_scheme(app, Mode::Adapm), Scheme::Naive);
            assert_eq!(resolve(app, Mode::Adapm, None), Scheme::Naive);
        }
        for good in ["naive", "local", "local:next"] {
            let scheme = parse_scheme(good).unwrap();
            check_scheme(Mode::Adapm, scheme).unwrap();
            assert_eq!(draws_ahead(scheme), good == "naive");
        }
        for bad in ["preloc", "pool:4", "pool:4:strict"] {
            let scheme = parse_scheme(bad).unwrap();
            let err = check_scheme(Mode::Adapm, scheme).unwrap_err().to_string();
            assert!(err.contains("adapm") && err.contains(bad), "{err}");
            // The other modes take every scheme.
            check_scheme(Mode::Lapse, scheme).unwrap();
        }
    }
}
