//! What the workloads' NuPS modes share: checks of the choosers' and sync options, a
//! fingerprint of a replicated set (every node sums it into the cluster sums, so a job can
//! check that all nodes replicate the same keys), and the sync figures of the report.
//!
//! The figures are per-node counters summed over the nodes with the job's `SumKeys`, so every
//! value must stay exact in an `f32` sum of 16-bit limbs: hence a 32-bit fingerprint.

use std::time::Duration;

use anyhow::ensure;
use roam::{Key, NodeStats, Worker};
use serde_json::{Map, Value, json};

use crate::common::SumKeys;

/// NuPS's untuned threshold for KGE and MF: replicate the keys accessed at least this many times
/// as often as the mean key (docs/workloads-kge.md, docs/workloads-mf.md: why 100).
pub const NUPS_ALPHA: f64 = 100.0;

/// Options of the NuPS modes of KGE and MF (ignored in the other modes; w2v scores its keys
/// by expected accesses and has its own).
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// nups modes: replicate the keys counted at least F times as often as the mean key (KGE:
    /// entities by their training triples, every relation regardless; MF: columns by their
    /// training cells).
    #[arg(long, default_value_t = NUPS_ALPHA)]
    pub replicate_alpha: f64,
    /// nups modes: replicate the N most counted keys instead (KGE: plus every relation).
    #[arg(long, conflicts_with = "replicate_alpha")]
    pub replicate_top: Option<usize>,
    /// nups modes: time between background replica syncs, in milliseconds (default: roam's,
    /// 10 ms).
    #[arg(long)]
    pub sync_every_ms: Option<f64>,
    /// nups modes: a work clock for the syncs: a round starts once a node pushed this many
    /// keys per replicated key since the last one (rounds follow training progress, not wall
    /// time; `--sync-every-ms` then only bounds the time between rounds, default 1000).
    #[arg(long)]
    pub sync_updates_per_key: Option<f64>,
}

impl Options {
    /// Checks the values.
    pub fn validate(&self) -> anyhow::Result<()> {
        check_alpha(self.replicate_alpha)?;
        check_updates_per_key(self.sync_updates_per_key)?;
        sync_every(self.sync_every_ms).map(drop)
    }

    /// A chooser's options with roam's sync defaults (the apps' unit tests).
    #[cfg(test)]
    pub(crate) fn choosing(replicate_alpha: f64, replicate_top: Option<usize>) -> Self {
        Self {
            replicate_alpha,
            replicate_top,
            sync_every_ms: None,
            sync_updates_per_key: None,
        }
    }

    /// Sets `cfg`'s sync period and work clock from these options, for `replicated` keys.
    pub fn configure(&self, cfg: &mut roam::Config, replicated: usize) {
        if let Some(per_key) = self.sync_updates_per_key {
            cfg.replica_sync_after_updates = work_clock(per_key, replicated);
            cfg.replica_sync_every = Duration::from_secs_f64(WORK_CLOCK_BOUND_MS / 1e3);
        }
        if let Some(every) = self.sync_every() {
            cfg.replica_sync_every = every;
        }
    }

    /// The sync period to configure, if not roam's default.
    pub fn sync_every(&self) -> Option<Duration> {
        sync_every(self.sync_every_ms).expect("validated")
    }

    /// The report's `replication` object: the workload's own `fields` about what it replicated,
    /// then the choice ([`Options::figures`]) and the sync figures ([`sync_figures`]) of the
    /// cluster sums of [`node_counters`] over `nodes` nodes.
    pub fn report(&self, mut fields: Value, sums: &[u64], nodes: u32) -> Value {
        let object = fields
            .as_object_mut()
            .expect("the workload's fields are an object");
        object.extend(self.figures());
        object.extend(sync_figures(sums, nodes));
        fields
    }

    /// The report's description of the choice ([`chooser_figures`]).
    pub fn figures(&self) -> Map<String, Value> {
        let bound = self.sync_updates_per_key.map(|_| WORK_CLOCK_BOUND);
        let period = self
            .sync_every()
            .or(bound)
            .unwrap_or(roam::config::DEFAULT_REPLICA_SYNC_EVERY);
        let mut figures = chooser_figures(self.replicate_alpha, self.replicate_top, period);
        figures.insert(
            "sync_updates_per_key".into(),
            json!(self.sync_updates_per_key),
        );
        figures
    }
}

/// Checks that every node replicates the same `keys` (a collective: every worker of every node
/// calls it) by summing each node's [`fingerprint`] and a 1 over the nodes through `sums`
/// (whose first two counters it uses): the total must be the node count times this node's.
pub fn check_same_set(sums: &SumKeys, worker: &Worker, keys: &[Key]) -> anyhow::Result<()> {
    let mine = fingerprint(keys);
    if worker.id() == 0 {
        let mut counters = vec![0; sums.counters()];
        counters[..2].copy_from_slice(&[mine, 1]);
        sums.contribute(worker, &counters)?;
    }
    let totals = sums.barrier_and_read(worker)?;
    ensure!(
        totals[0] == totals[1] * mine,
        "the nodes chose different replicated keys (this node: {} keys); every node must load \
         the same data with the same options",
        keys.len()
    );
    Ok(())
}

/// A 32-bit digest of a replicated set (its sum over up to 2^16 nodes stays exact).
pub fn fingerprint(keys: &[Key]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ keys.len() as u64;
    for &k in keys {
        h = (h ^ k).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    h & 0xffff_ffff
}

/// Replication counters each node adds to the cluster sums: sync rounds, replica bytes sent,
/// its staleness median and 99th percentile in µs, and 1 if it measured any staleness (a node
/// that receives no replica values from other hubs has none).
pub const COUNTERS: usize = 5;

/// This node's [`COUNTERS`].
pub fn node_counters(stats: &NodeStats) -> [u64; COUNTERS] {
    [
        stats.replica_rounds,
        stats.replica_bytes_sent,
        stats.replica_staleness_p50_us.round() as u64,
        stats.replica_staleness_p99_us.round() as u64,
        u64::from(stats.replica_keys_received > 0),
    ]
}

/// The report's sync figures from the cluster sums of [`node_counters`] over `nodes` nodes:
/// rounds per node, bytes sent and bytes per round (deltas to hubs and values from them), and
/// the staleness percentiles averaged over the nodes that measured any.
pub fn sync_figures(sums: &[u64], nodes: u32) -> Map<String, Value> {
    let (rounds, bytes) = (sums[0], sums[1]);
    let measured = sums[4].max(1) as f64;
    let Value::Object(figures) = json!({
        "rounds_per_node": rounds as f64 / f64::from(nodes.max(1)),
        "bytes_sent": bytes,
        "bytes_per_round": if rounds == 0 { 0.0 } else { bytes as f64 / rounds as f64 },
        "staleness_p50_us": sums[2] as f64 / measured,
        "staleness_p99_us": sums[3] as f64 / measured,
    }) else {
        unreachable!("an object literal")
    };
    figures
}

/// The report's description of the choice: chooser, α or N, and the sync period.
pub fn chooser_figures(alpha: f64, top: Option<usize>, sync_every: Duration) -> Map<String, Value> {
    let Value::Object(figures) = json!({
        "chooser": if top.is_some() { "top_n" } else { "above_mean" },
        "alpha": top.is_none().then_some(alpha),
        "top": top,
        "sync_every_ms": sync_every.as_secs_f64() * 1e3,
    }) else {
        unreachable!("an object literal")
    };
    figures
}

/// With a work clock, the longest time between two sync rounds unless `--sync-every-ms` says
/// otherwise: the staleness bound while a node makes little progress.
pub const WORK_CLOCK_BOUND_MS: f64 = 1000.0;
const WORK_CLOCK_BOUND: Duration = Duration::from_millis(WORK_CLOCK_BOUND_MS as u64);

/// The work clock's period in key-updates: `per_key` updates for each of `replicated` keys
/// (at least 1).
pub fn work_clock(per_key: f64, replicated: usize) -> u64 {
    ((per_key * replicated as f64).ceil() as u64).max(1)
}

/// Checks `--sync-updates-per-key`.
pub fn check_updates_per_key(per_key: Option<f64>) -> anyhow::Result<()> {
    if let Some(c) = per_key {
        ensure!(
            c.is_finite() && c > 0.0 && c <= 1e6,
            "--sync-updates-per-key must be in (0, 1000000], got {c}"
        );
    }
    Ok(())
}

/// Checks `--replicate-alpha`.
pub fn check_alpha(alpha: f64) -> anyhow::Result<()> {
    ensure!(
        alpha.is_finite() && alpha >= 0.0,
        "--replicate-alpha must be a finite number >= 0, got {alpha}"
    );
    Ok(())
}

/// Checks `--sync-every-ms` and turns it into the period to configure (`None`: roam's default).
pub fn sync_every(ms: Option<f64>) -> anyhow::Result<Option<Duration>> {
    let Some(ms) = ms else {
        return Ok(None);
    };
    ensure!(
        ms.is_finite() && ms > 0.0 && ms <= 3.6e6,
        "--sync-every-ms must be in (0, 3600000], got {ms}"
    );
    Ok(Some(Duration::from_secs_f64(ms / 1e3)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_tell_sets_apart_and_fit_32_bits() {
        let a = fingerprint(&[1, 2, 3]);
        assert_ne!(a, fingerprint(&[1, 2, 4]));
        assert_ne!(a, fingerprint(&[1, 2]));
        assert_ne!(fingerprint(&[]), fingerprint(&[0]));
        assert!(a < 1 << 32);
    }

    #[test]
    fn figures_average_staleness_over_the_nodes_that_measured_it() {
        // Two nodes: 10 and 30 rounds, 1 000 bytes; only one measured staleness.
        let f = sync_figures(&[40, 1_000, 500, 900, 1], 2);
        assert_eq!(f["rounds_per_node"], 20.0);
        assert_eq!(f["bytes_per_round"], 25.0);
        assert_eq!(f["staleness_p50_us"], 500.0);
        let c = chooser_figures(100.0, Some(7), Duration::from_millis(10));
        assert_eq!(
            (c["chooser"].as_str(), c["alpha"].is_null()),
            (Some("top_n"), true)
        );
        assert!(sync_every(Some(0.0)).is_err() && check_alpha(-1.0).is_err());
        assert_eq!(
            sync_every(Some(2.5)).unwrap(),
            Some(Duration::from_micros(2500))
        );
    }

    #[test]
    fn a_work_clock_counts_updates_per_replicated_key_and_bounds_rounds_by_a_second() {
        assert_eq!(work_clock(4.0, 9507), 38028);
        assert_eq!(work_clock(0.1, 3), 1, "at least one update");
        assert!(check_updates_per_key(Some(f64::NAN)).is_err());
        let opts = |per_key, ms| Options {
            replicate_alpha: NUPS_ALPHA,
            replicate_top: None,
            sync_every_ms: ms,
            sync_updates_per_key: per_key,
        };
        let mut cfg = roam::Config::new(10, 1);
        opts(Some(2.0), None).configure(&mut cfg, 100);
        assert_eq!(cfg.replica_sync_after_updates, 200);
        assert_eq!(cfg.replica_sync_every, Duration::from_secs(1));
        let mut cfg = roam::Config::new(10, 1);
        opts(Some(2.0), Some(50.0)).configure(&mut cfg, 100);
        assert_eq!(cfg.replica_sync_every, Duration::from_millis(50));
        let mut cfg = roam::Config::new(10, 1);
        opts(None, Some(50.0)).configure(&mut cfg, 100);
        assert_eq!(cfg.replica_sync_after_updates, 0, "by time alone");
        assert_eq!(opts(Some(2.0), None).figures()["sync_every_ms"], 1000.0);
    }
}
