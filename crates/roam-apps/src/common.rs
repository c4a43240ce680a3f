//! What every training job shares: modes, cluster-wide sums, the report.
//!
//! Modes map onto node configurations:
//! - `single`: one node with all threads, no network (the baseline every distributed run must
//!   beat); started without the cluster environment even under a launcher would be wrong, so
//!   it refuses to run with more than one node;
//! - `classic`: static allocation with keys spread at random (hash) over nodes, fast local
//!   access on;
//! - `classic-nolocal`: the same with every access through the node's message path (ps-lite);
//! - `lapse`: dynamic allocation (home by range) with the workload's locality technique;
//! - `nups`: NuPS — the workload's hot keys (picked by [`roam::choose`] from its data's
//!   frequencies) replicated on every node, the rest relocated as in `lapse`;
//! - `nups-replicate-only`: the hot keys replicated, the rest static as in `classic` (the
//!   ablation without relocation; `lapse` is the one without replication);
//! - `adapm`: AdaPM — dynamic allocation as in `lapse`, no replicated keys, but the workload
//!   never localizes: it signals *intents* ([`roam::Worker::intent`]) for the data it will
//!   process a fixed distance ahead, ticks its clock once per unit of data
//!   ([`roam::Worker::advance_clock`]), and roam decides when to bring the keys here
//!   ([`crate::intents`]).

use std::time::Instant;

use anyhow::ensure;
use roam::{Allocation, Config, Key, NodeHandle, NodeStats, Worker};
use roam_core::Partitioning;
use serde::Serialize;

/// How a job places its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One node, all threads, no network.
    Single,
    /// Static allocation, keys spread at random over nodes, fast local access.
    Classic,
    /// Static allocation, every access through messages (a ps-lite-like server).
    ClassicNolocal,
    /// Dynamic allocation with the workload's locality technique.
    Lapse,
    /// Hot keys replicated, the rest relocated as in `lapse` (NuPS).
    Nups,
    /// Hot keys replicated, the rest static as in `classic` (ablation).
    NupsReplicateOnly,
    /// Dynamic allocation driven by intent signaling: the workload says which keys it will
    /// access when; roam decides when to act, and per key whether to move it to the one node
    /// that wants it or replicate it while several do (AdaPM).
    Adapm,
    /// `adapm` acting by relocation only (ablation).
    AdapmRelocateOnly,
    /// `adapm` acting by replication only: keys stay with their owner, every node that wants
    /// one gets a replica (ablation).
    AdapmReplicateOnly,
}

impl Mode {
    /// The mode's name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Classic => "classic",
            Self::ClassicNolocal => "classic-nolocal",
            Self::Lapse => "lapse",
            Self::Nups => "nups",
            Self::NupsReplicateOnly => "nups-replicate-only",
            Self::Adapm => "adapm",
            Self::AdapmRelocateOnly => "adapm-relocate-only",
            Self::AdapmReplicateOnly => "adapm-replicate-only",
        }
    }

    /// Whether the workload replicates its hot keys (the NuPS modes).
    pub fn replicates(self) -> bool {
        matches!(self, Self::Nups | Self::NupsReplicateOnly)
    }

    /// How keys are homed: by range where keys move (or on one node), by hash where they stay.
    pub fn partitioning(self) -> Partitioning {
        match self {
            Self::Classic | Self::ClassicNolocal | Self::NupsReplicateOnly => Partitioning::Hash,
            Self::Single
            | Self::Lapse
            | Self::Nups
            | Self::Adapm
            | Self::AdapmRelocateOnly
            | Self::AdapmReplicateOnly => Partitioning::Range,
        }
    }

    /// Whether the workload should localize parameters (`lapse` and `nups`).
    pub fn localizes(self) -> bool {
        matches!(self, Self::Lapse | Self::Nups)
    }

    /// Whether the workload signals intents instead of localizing (the `adapm` modes).
    pub fn signals_intents(self) -> bool {
        matches!(
            self,
            Self::Adapm | Self::AdapmRelocateOnly | Self::AdapmReplicateOnly
        )
    }

    /// Applies the mode to a configuration.
    pub fn configure(self, cfg: &mut Config) {
        let (allocation, fast) = match self {
            Self::Single => (Allocation::StaticRange, true),
            Self::Classic => (Allocation::StaticHash, true),
            Self::ClassicNolocal => (Allocation::StaticHash, false),
            Self::Lapse
            | Self::Nups
            | Self::Adapm
            | Self::AdapmRelocateOnly
            | Self::AdapmReplicateOnly => (Allocation::Dynamic, true),
            Self::NupsReplicateOnly => (Allocation::StaticHash, true),
        };
        cfg.intent_techniques = match self {
            Self::AdapmRelocateOnly => roam::IntentTechniques::RelocateOnly,
            Self::AdapmReplicateOnly => roam::IntentTechniques::ReplicateOnly,
            _ => roam::IntentTechniques::All,
        };
        cfg.allocation = allocation;
        cfg.home = Partitioning::Range;
        cfg.fast_local_access = fast;
        if self == Self::Single {
            cfg.cluster.rank = Some(0);
            cfg.cluster.num_nodes = Some(1);
        }
    }

    /// Starts the node for this mode, refusing `single` inside a multi-node launch.
    pub fn start(self, mut cfg: Config) -> anyhow::Result<NodeHandle> {
        if self == Self::Single {
            let launched = std::env::var("ROAM_NUM_NODES")
                .ok()
                .and_then(|n| n.parse::<u32>().ok());
            ensure!(
                launched.unwrap_or(1) <= 1,
                "mode single runs on one node; it was launched on {} nodes (drop `roam launch`)",
                launched.unwrap_or(1)
            );
        }
        ensure!(
            self != Self::Single || !roam::cluster_env::join(roam::cluster_env::process_lookup)?,
            "mode single cannot join a running job (ROAM_JOIN is set)"
        );
        self.configure(&mut cfg);
        let node = NodeHandle::start(cfg)?;
        if node.is_joined() {
            serve_until_done(node);
        }
        Ok(node)
    }
}

/// A node that joined a running job (`ROAM_JOIN=1`, `roam join`) hosts no workers: it serves
/// its share of the keys until it is drained or the job finishes, then this process exits
/// (status 0, or 1 if the cluster failed) without running the job's own code.
fn serve_until_done(node: NodeHandle) -> ! {
    let rank = node.rank();
    eprintln!(
        "roam: joined the running job as rank {rank} (a server); serving until drained or the job ends"
    );
    match node.shutdown() {
        Ok(_) => {
            eprintln!("roam: rank {rank} is done");
            std::process::exit(0)
        }
        Err(err) => {
            eprintln!("Error: rank {rank}: {err}");
            std::process::exit(1)
        }
    }
}

/// Number of 16-bit limbs per counter: sums over up to 256 nodes stay exact in `f32`.
const LIMBS: usize = 4;

/// Keys reserved for summing `u64` counters over all nodes exactly through the parameter
/// server (each counter is split into 16-bit limbs, which `f32` adds exactly).
#[derive(Clone, Debug)]
pub struct SumKeys {
    keys: Vec<Key>,
    len: usize,
    counters: usize,
}

impl SumKeys {
    /// Values needed to sum `counters` counters.
    pub fn values_needed(counters: usize) -> usize {
        counters * LIMBS
    }

    /// Uses `keys` (of `len` values each, at least `values_needed(counters)` in total).
    pub fn new(keys: Vec<Key>, len: usize, counters: usize) -> Self {
        assert!(
            keys.len() * len >= Self::values_needed(counters),
            "not enough room for the sums"
        );
        Self {
            keys,
            len,
            counters,
        }
    }

    /// Number of counters summed.
    pub fn counters(&self) -> usize {
        self.counters
    }

    /// Number of keys needed for `counters` counters at `len` values per key.
    pub fn keys_needed(counters: usize, len: usize) -> usize {
        Self::values_needed(counters).div_ceil(len)
    }

    /// Called by exactly one worker per node with that node's counters: returns, on every
    /// calling worker, the sums over all nodes. All workers of all nodes must call
    /// [`SumKeys::barrier_and_read`] afterwards (it contains the barriers).
    pub fn contribute(&self, worker: &Worker, counters: &[u64]) -> anyhow::Result<()> {
        ensure!(
            counters.len() == self.counters,
            "expected {} counters",
            self.counters
        );
        let mut vals = vec![0f32; self.keys.len() * self.len];
        for (i, &c) in counters.iter().enumerate() {
            for limb in 0..LIMBS {
                vals[i * LIMBS + limb] = ((c >> (16 * limb)) & 0xffff) as f32;
            }
        }
        worker.push(&self.keys, &vals)?.wait()?;
        Ok(())
    }

    /// Barrier, read the sums, barrier, and (on global worker 0) reset them for the next use.
    pub fn barrier_and_read(&self, worker: &Worker) -> anyhow::Result<Vec<u64>> {
        worker.barrier()?;
        let mut vals = vec![0f32; self.keys.len() * self.len];
        worker.pull(&self.keys, &mut vals)?.wait()?;
        worker.barrier()?;
        if worker.global_id() == 0 {
            worker.set(&self.keys, &vec![0f32; vals.len()])?.wait()?;
        }
        worker.barrier()?;
        Ok((0..self.counters)
            .map(|i| {
                (0..LIMBS)
                    .map(|limb| (vals[i * LIMBS + limb] as u64) << (16 * limb))
                    .sum()
            })
            .collect())
    }
}

/// Cluster-wide counters reported with every job.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClusterCounters {
    /// Fraction of accessed keys served locally, over all nodes.
    pub local_fraction: f64,
    /// Frames sent by all nodes.
    pub messages_sent: u64,
    /// Bytes sent by all nodes.
    pub bytes_sent: u64,
    /// Keys relocated (moved in) on all nodes.
    pub relocations: u64,
    /// CPU seconds (all threads) of all node processes over the span the other counters
    /// cover; per-epoch figures are in each epoch's `cpu_seconds`.
    pub cpu_seconds: f64,
}

/// The counters [`ClusterCounters`] is summed from, in [`SumKeys`] order.
pub const CLUSTER_COUNTERS: usize = 6;

/// This node's contribution to [`ClusterCounters`].
pub fn node_counters(stats: &NodeStats) -> [u64; CLUSTER_COUNTERS] {
    let local = stats.local_pull_keys + stats.local_push_keys;
    let remote = stats.remote_pull_keys + stats.remote_push_keys;
    [
        local,
        local + remote,
        stats.messages_sent,
        stats.bytes_sent,
        stats.relocations_in,
        process_cpu_micros(),
    ]
}

/// CPU time this process has used so far, all threads, in microseconds
/// (`CLOCK_PROCESS_CPUTIME_ID`). Differences between two readings on one node, summed over
/// nodes with [`SumKeys`], give a job's CPU cost per epoch.
pub fn process_cpu_micros() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// Microseconds (summed exactly by [`SumKeys`]) to seconds.
pub fn micros_to_seconds(micros: u64) -> f64 {
    micros as f64 / 1e6
}

impl ClusterCounters {
    /// From sums of [`node_counters`] over all nodes.
    pub fn from_sums(sums: &[u64]) -> Self {
        Self {
            local_fraction: if sums[1] == 0 {
                0.0
            } else {
                sums[0] as f64 / sums[1] as f64
            },
            messages_sent: sums[2],
            bytes_sent: sums[3],
            relocations: sums[4],
            cpu_seconds: micros_to_seconds(sums[5]),
        }
    }
}

/// Wall-clock stopwatch for epochs.
#[derive(Debug)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    /// Starts now.
    pub fn start() -> Self {
        Self(Instant::now())
    }

    /// Seconds since start.
    pub fn seconds(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

/// The report rank 0 makes at the end of a training job ([`crate::output`] prints or writes it).
#[derive(Clone, Debug, Serialize)]
pub struct TrainReport {
    /// `mf`, `kge`, `w2v` or `ctr`.
    pub app: &'static str,
    /// The mode's name.
    pub mode: &'static str,
    /// Nodes in the run.
    pub nodes: u32,
    /// Worker threads per node.
    pub workers_per_node: u32,
    /// Dataset name (directory or synthetic spec).
    pub dataset: String,
    /// Per-epoch figures: `{epoch, seconds, loss, ...quality}`.
    pub epochs: Vec<serde_json::Value>,
    /// Cluster-wide counters.
    #[serde(flatten)]
    pub counters: ClusterCounters,
    /// App-specific settings worth recording (dimension, learning rate, ...).
    pub settings: serde_json::Value,
    /// The intent counters of the whole run, summed over the cluster ([`crate::intents`];
    /// `adapm` mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intents: Option<serde_json::Value>,
}

impl TrainReport {
    /// The report as JSON.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("reports serialise")
    }
}

/// Parses a `--synthetic` spec, comma-separated `key=value` pairs (blanks around either
/// ignored), handing each to `set`, which parses the value and refuses unknown keys; every
/// error names the spec and the pair.
pub fn parse_spec_pairs(
    spec: &str,
    mut set: impl FnMut(&str, &str) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = part.split_once('=') else {
            anyhow::bail!("synthetic spec {spec:?}: {part:?} is not key=value");
        };
        let (key, value) = (key.trim(), value.trim());
        set(key, value).with_context(|| format!("synthetic spec {spec:?}: {key}={value:?}"))?;
    }
    Ok(())
}

/// The synthetic data set a job generates when it is given no `--data`: `--synthetic`'s spec
/// (`given`), named `synthetic:SPEC` in the report, or else the app's `embedded` one, named
/// `LABEL:SPEC`.
pub fn synthetic_spec<S: std::str::FromStr<Err = anyhow::Error>>(
    given: Option<&str>,
    embedded: &str,
    label: &str,
) -> anyhow::Result<(S, String)> {
    let (text, name) = match given {
        Some(spec) => (spec, format!("synthetic:{spec}")),
        None => (embedded, format!("{label}:{embedded}")),
    };
    Ok((text.parse()?, name))
}

/// An app's `Args` parsed from `given` (its flags, without the program name) as `roam train`
/// would parse them, for the apps' unit tests.
#[cfg(test)]
pub(crate) fn parse_args<A: clap::Args + clap::FromArgMatches>(
    app: &'static str,
    given: &[&str],
) -> A {
    let command = A::augment_args(clap::Command::new(app));
    let matches = command
        .try_get_matches_from(std::iter::once(app).chain(given.iter().copied()))
        .unwrap();
    A::from_arg_matches(&matches).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapm_is_lapse_placement_without_localize_or_replicas() {
        let mode = Mode::Adapm;
        assert_eq!(mode.name(), "adapm");
        assert!(mode.signals_intents() && !mode.localizes() && !mode.replicates());
        assert_eq!(mode.partitioning(), Mode::Lapse.partitioning());
        let (mut adapm, mut lapse) = (Config::new(10, 1), Config::new(10, 1));
        mode.configure(&mut adapm);
        Mode::Lapse.configure(&mut lapse);
        assert_eq!(adapm.allocation, Allocation::Dynamic);
        assert_eq!(
            (adapm.allocation, adapm.home, adapm.fast_local_access),
            (lapse.allocation, lapse.home, lapse.fast_local_access)
        );
        assert_eq!(
            serde_json::to_value(mode).unwrap(),
            serde_json::json!("adapm")
        );
        for other in [
            Mode::Single,
            Mode::Classic,
            Mode::ClassicNolocal,
            Mode::Lapse,
            Mode::Nups,
            Mode::NupsReplicateOnly,
        ] {
            assert!(!other.signals_intents(), "{}", other.name());
        }
    }
}
