//! Configuration of one roam node.
//!
//! Every field has a default that makes a single-node run work with no environment at all;
//! cluster fields left unset are resolved from the environment at start (see `cluster_env`).

use std::time::Duration;

use roam_core::wire::Limits;
use roam_core::{
    Balancer, DynamicPolicy, Initializer, IntentTechniques, IntentTiming, Key, KeySpace,
    KeySpaceError, LoadWatch, Optimizer, Partitioning, RecordLayout, SamplerId, SamplerSpec,
    TableSpec, Tables, ValueLengths,
};

use crate::cluster_env::{self, ClusterOverrides};
use crate::error::StartError;

/// How keys are placed on nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocation {
    /// Classic parameter server: node `i` owns a contiguous key range for the whole run.
    StaticRange,
    /// Classic parameter server: keys spread pseudo-randomly over nodes for the whole run.
    StaticHash,
    /// Keys start at their home node (see [`Config::home`]) and move to the nodes that
    /// localize them (Lapse).
    Dynamic,
}

impl Allocation {
    /// Whether keys can move.
    pub fn is_dynamic(self) -> bool {
        self == Self::Dynamic
    }

    /// The name used on command lines and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::StaticRange => "static-range",
            Self::StaticHash => "static-hash",
            Self::Dynamic => "dynamic",
        }
    }
}

impl std::str::FromStr for Allocation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "static-range" => Ok(Self::StaticRange),
            "static-hash" => Ok(Self::StaticHash),
            "dynamic" => Ok(Self::Dynamic),
            other => Err(format!(
                "unknown allocation {other:?}: expected static-range, static-hash or dynamic"
            )),
        }
    }
}

/// Configuration of a node. Build with [`Config::new`] and adjust the public fields.
#[derive(Clone, Debug)]
pub struct Config {
    /// Number of keys; keys are `0..num_keys` (ignored when `sparse_keys` is set).
    pub num_keys: u64,
    /// Values per key: uniform or per key (sparse keys need a uniform length).
    pub value_lengths: ValueLengths,
    /// Every `u64` is a key (hashed feature ids, user ids): keys are created, with the
    /// [`Config::initializer`]'s values, where they are first used, and nodes hold state only
    /// for keys they have seen.
    /// Set by [`Config::sparse`].
    pub sparse_keys: bool,
    /// Hidden state stored after each key's values (e.g. optimizer moments): never pulled,
    /// moved with the key.
    pub record_layout: RecordLayout,
    /// What `push_gradients` applies where each record lives (SGD, Adagrad, Adam, FTRL; see
    /// `docs/embeddings.md`). It sets the record layout to its own state, so leave
    /// `record_layout` at its default. `None`: gradients are refused.
    pub optimizer: Option<Optimizer>,
    /// How new rows are filled: zeros (the default), uniform or normal, a pure function of
    /// (seed, key) so that every node creates the same row (see `docs/embeddings.md`).
    pub initializer: Initializer,
    /// Admission and eviction of a sparse key space's rows (see [`Config::dynamic`] and
    /// `docs/embeddings.md`); `None`: every id gets a row on first use and keeps it.
    pub dynamic: Option<DynamicPolicy>,
    /// Named tables (see [`Config::tables`] and `docs/embeddings.md`): when not empty, the
    /// node's key space is these tables, each with its own dimension, initializer, optimizer
    /// and kind, and `num_keys`, `value_lengths`, `sparse_keys`, `record_layout`,
    /// `optimizer`, `initializer` and `dynamic` must stay at their defaults. Address them with
    /// [`crate::Worker::table`].
    pub tables: Vec<TableSpec>,
    /// Worker threads per node; `None` reads `ROAM_WORKERS_PER_NODE`, else 1.
    pub workers_per_node: Option<u32>,
    /// Key placement.
    pub allocation: Allocation,
    /// Home nodes under dynamic allocation: by key range or by hash (static modes imply theirs).
    pub home: Partitioning,
    /// Under dynamic allocation, whether nodes remember where keys were last seen and send
    /// there directly (see the consistency notes in the docs).
    pub location_caches: bool,
    /// Whether workers access local keys directly (true) or through the node's message path.
    pub fast_local_access: bool,
    /// Rank, node count and coordinator; unset fields come from the environment.
    pub cluster: ClusterOverrides,
    /// Join a running cluster as a server-only node (no workers) instead of taking part in the
    /// start-up rendezvous: the coordinator (from [`Config::cluster`] or the environment)
    /// assigns the rank; rank and node count settings are ignored. `ROAM_JOIN=1` sets it too.
    /// Every other setting must equal the members' (key space, allocation, partitioning).
    pub join: bool,
    /// Cluster secret; `None` reads `ROAM_CLUSTER_TOKEN` (required for more than one node).
    pub token: Option<String>,
    /// Emulated one-way link latency in µs; `None` reads `ROAM_EMULATE_LATENCY_US`, else 0.
    pub emulate_latency_us: Option<u64>,
    /// A peer silent for this long is declared gone and every operation waiting on it fails
    /// (default 5 s; `ROAM_PEER_TIMEOUT=SECONDS` overrides it).
    pub peer_timeout: Duration,
    /// A barrier that waits this long logs (a tracing warning) which workers (node, worker id)
    /// it still waits for, and again after every further such interval; default 30 s, `None`
    /// never.
    pub barrier_warning: Option<Duration>,
    /// Response-time reports between the nodes and straggler detection (PSLD; see
    /// `roam_core::load`): on by default (one small frame per peer every 500 ms); `None`
    /// turns it off.
    pub load_watch: Option<LoadWatch>,
    /// The load balancer (PSLD; see `roam_core::balance`): moves home buckets (and, under
    /// static allocation, their keys) away from stragglers. On by default; needs
    /// `load_watch`; `None` turns it off.
    pub balancer: Option<Balancer>,
    /// How long start-up may take to find and connect all peers.
    pub rendezvous_timeout: Duration,
    /// Start from the checkpoint in this directory (see [`crate::checkpoint`]): each node
    /// loads the keys its directory homes at it, from a checkpoint of any node count. A
    /// damaged or mismatched checkpoint fails the start. Set by [`Config::restore_from`].
    pub restore_from: Option<std::path::PathBuf>,
    /// Where each node keeps its spill file (`roam-spill-node-<rank>.bin`, created empty at
    /// start) when a dynamic policy sets `spill` (see `docs/embeddings.md`); required then.
    pub spill_dir: Option<std::path::PathBuf>,
    /// Bounds on received frames.
    pub limits: Limits,
    /// Keys replicated on every node (NuPS): read and pushed locally everywhere, synchronised
    /// in the background every `replica_sync_every`. Pick them with [`crate::choose`]; every
    /// node must be given the same set. See the consistency notes in `docs/architecture.md`.
    pub replicated_keys: Vec<Key>,
    /// Time between two replica sync rounds (with `replica_sync_after_updates`: the longest
    /// time between two rounds).
    pub replica_sync_every: Duration,
    /// A work clock for the sync rounds (0, the default: off): a round also starts once this
    /// node's workers pushed this many keys into the local store since the last one, or, as a
    /// hub, it received deltas that count for as many, so that rounds follow training progress
    /// instead of wall time. See `roam_core::Replication::sync_after_updates`.
    pub replica_sync_after_updates: u64,
    /// Background sync rounds leave a replica's delta pending while its L2 norm is below this
    /// (0, the default: every non-zero delta goes out); `sync_replicas` sends all.
    pub replica_min_delta_norm: f32,
    /// Sampling distributions and their schemes (NuPS), named by [`SamplerId`] in this order:
    /// register them with [`Config::add_sampler`]; every node must register the same ones.
    /// See [`crate::Worker::prepare_sample`].
    pub samplers: Vec<SamplerSpec>,
    /// Seed of the samplers' random numbers (each node and worker derives its own stream).
    pub sampling_seed: u64,
    /// When workers act on the intents they signal ([`crate::Worker::intent`]): shortly
    /// before each intent's start clock, by the measured time an action takes (the default),
    /// or at once (ablation).
    pub intent_timing: IntentTiming,
    /// What acting on an intent may do with a key another node holds: move it to the one
    /// node that wants it and share it while several do (the default), or only one of the two
    /// (ablations).
    pub intent_techniques: IntentTechniques,
    /// Whether a node keeps its interest in a key past its last short intent on it (an intent
    /// shorter than a share-sync round) for as long as keeping it costs less than getting it
    /// back, while that pays more often than not (the default); off, interest ends with the
    /// intent, as in AdaPM's paper (ablation).
    pub intent_linger: bool,
    /// Time between the sync rounds of keys shared by intent (their replicas' staleness is
    /// at most about two of these plus two network deliveries); with
    /// `share_sync_updates_per_key` (the default), the longest time between two rounds.
    pub share_sync_every: Duration,
    /// A work clock for the share-sync rounds (0: off, rounds every `share_sync_every`): a
    /// round also starts once this node's workers pushed this many keys per key shared here
    /// since the last one, or, as an owner, it received deltas of as many keys as are shared
    /// here. See `roam_core::ShareSync::updates_per_key` and `docs/benchmarks.md` ("Share-sync
    /// rounds by work") for the default.
    pub share_sync_updates_per_key: u64,
    /// Whether [`crate::NodeHandle::shutdown`] prints the node's counters as one
    /// `roam_node_stats` JSON line on stdout (the default); a program that reports them its own
    /// way (`roam train` without `--json`) turns it off and uses the returned counters.
    pub print_stats: bool,
    /// Record every change of where a key is held and sample the access counters
    /// ([`crate::NodeHandle::take_allocation_trace`]); off by default.
    pub trace_allocation: bool,
    /// Serve Prometheus metrics at `http://HOST:PORT/metrics` (see `docs/metrics.md`); `None`
    /// reads `ROAM_METRICS_ADDR`, else no endpoint. `roam launch --metrics-addr` gives each
    /// node the port plus its rank.
    pub metrics_addr: Option<String>,
    /// At the end of [`crate::NodeHandle::shutdown`] (links closed, so no peer waits), keep
    /// answering `/metrics` until a Prometheus server has scraped this node this many times in
    /// all (at most `rendezvous_timeout` longer), so that a short job's final figures are
    /// collected; `None` reads `ROAM_METRICS_HOLD`, else 0 (no hold).
    pub metrics_hold_scrapes: Option<u64>,
}

/// The cluster this process joins, resolved from the [`Config`] and the environment exactly as
/// [`crate::NodeHandle::start`] resolves it (start calls the same function), so that a program
/// can size its model by the cluster before it starts the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterInfo {
    /// This node's rank, `0..num_nodes`.
    pub rank: u32,
    /// Nodes (processes) in the cluster.
    pub num_nodes: u32,
    /// Worker threads per node.
    pub workers_per_node: u32,
    /// The coordinator's `host:port` (used for rendezvous only with more than one node).
    pub coordinator: String,
    /// Emulated one-way link latency in µs (0: none).
    pub emulate_latency_us: u64,
}

impl Config {
    /// The cluster this process would join now: rank, node count and coordinator from
    /// [`Config::cluster`], then the roam / torchrun / Slurm / Open MPI variables; workers per
    /// node from [`Config::workers_per_node`], then `ROAM_WORKERS_PER_NODE`, else 1.
    pub fn resolve_cluster(&self) -> Result<ClusterInfo, StartError> {
        self.resolve_cluster_with(cluster_env::process_lookup)
    }

    /// [`Config::resolve_cluster`] with environment variables read through `lookup` (tests, or a
    /// launcher that holds the variables of another process).
    pub fn resolve_cluster_with(
        &self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<ClusterInfo, StartError> {
        let env = cluster_env::resolve(&self.cluster, &lookup)?;
        let workers_per_node = match self.workers_per_node {
            Some(w) => w,
            None => cluster_env::workers_per_node(&lookup)?.unwrap_or(1),
        };
        if workers_per_node == 0 {
            return Err(StartError::NoWorkers);
        }
        let emulate_latency_us = match self.emulate_latency_us {
            Some(l) => l,
            None => cluster_env::emulate_latency_us(&lookup)?.unwrap_or(0),
        };
        Ok(ClusterInfo {
            rank: env.rank,
            num_nodes: env.num_nodes,
            workers_per_node,
            coordinator: env.coordinator,
            emulate_latency_us,
        })
    }

    /// The home-node partitioning in effect.
    pub(crate) fn partitioning(&self) -> Partitioning {
        match self.allocation {
            Allocation::StaticRange => Partitioning::Range,
            Allocation::StaticHash => Partitioning::Hash,
            Allocation::Dynamic => self.home,
        }
    }

    /// A configuration for `num_keys` keys of `value_len` values each, with defaults elsewhere.
    pub fn new(num_keys: u64, value_len: u32) -> Self {
        Self::with_lengths(num_keys, ValueLengths::Uniform(value_len))
    }

    /// A configuration with per-key value lengths (`lengths[k]` values for key `k`).
    pub fn per_key(lengths: Vec<u32>) -> Self {
        Self::with_lengths(lengths.len() as u64, ValueLengths::PerKey(lengths.into()))
    }

    /// A configuration for sparse keys (any `u64`) of `value_len` values each, with homes by
    /// hash (ids are rarely uniform over their range).
    pub fn sparse(value_len: u32) -> Self {
        let mut cfg = Self::with_lengths(u64::MAX, ValueLengths::Uniform(value_len));
        cfg.sparse_keys = true;
        cfg.allocation = Allocation::StaticHash;
        cfg.home = Partitioning::Hash;
        cfg
    }

    /// A configuration for a *dynamic* key space: sparse keys (any `u64` id) of `value_len`
    /// values, rows created on first use under `policy` (admission, row budget, TTL).
    pub fn dynamic(value_len: u32, policy: DynamicPolicy) -> Self {
        let mut cfg = Self::sparse(value_len);
        cfg.dynamic = Some(policy);
        cfg
    }

    /// A configuration for named tables (see [`Config::tables`]), homes by hash.
    pub fn tables(tables: Vec<TableSpec>) -> Self {
        let mut cfg = Self::sparse(1);
        cfg.sparse_keys = false;
        cfg.tables = tables;
        cfg
    }

    /// The key space this configuration describes.
    pub fn key_space(&self) -> Result<KeySpace, KeySpaceError> {
        if !self.tables.is_empty() {
            return self.tables_space();
        }
        let space = if self.sparse_keys {
            match self.value_lengths {
                ValueLengths::Uniform(len) => KeySpace::sparse(len)?,
                ValueLengths::PerKey(_) | ValueLengths::PerTable(_) => {
                    return Err(KeySpaceError::SparsePerKey);
                }
            }
        } else {
            KeySpace::new(self.num_keys, self.value_lengths.clone())?
        };
        let space = space
            .with_layout(self.record_layout)
            .with_initializer(self.initializer)?;
        // The optimizer first: it sets the records' layout, which a byte budget is checked
        // against (it must hold one whole record, optimizer state included).
        let space = match self.optimizer {
            Some(optimizer) => space.with_optimizer(optimizer)?,
            None => space,
        };
        Ok(match self.dynamic {
            Some(policy) => space.with_dynamic(policy)?,
            None => space,
        })
    }

    /// [`Config::key_space`] of named tables: the node-wide row settings must be unset.
    fn tables_space(&self) -> Result<KeySpace, KeySpaceError> {
        let own = [
            ("optimizer", self.optimizer.is_some()),
            ("initializer", self.initializer != Initializer::Zeros),
            ("dynamic policy", self.dynamic.is_some()),
            (
                "record layout",
                self.record_layout != RecordLayout::default(),
            ),
            ("sparse keys", self.sparse_keys),
        ];
        if let Some((what, _)) = own.iter().find(|(_, set)| *set) {
            return Err(KeySpaceError::TablesOwn(what));
        }
        if self.partitioning() != Partitioning::Hash {
            return Err(KeySpaceError::TablesNeedHashHomes);
        }
        Ok(KeySpace::tables(Tables::new(self.tables.clone())?))
    }

    fn with_lengths(num_keys: u64, value_lengths: ValueLengths) -> Self {
        Self {
            num_keys,
            value_lengths,
            sparse_keys: false,
            record_layout: RecordLayout::default(),
            optimizer: None,
            initializer: Initializer::Zeros,
            dynamic: None,
            tables: Vec::new(),
            workers_per_node: None,
            allocation: Allocation::StaticRange,
            home: Partitioning::Range,
            location_caches: false,
            fast_local_access: true,
            cluster: ClusterOverrides::default(),
            join: false,
            token: None,
            emulate_latency_us: None,
            peer_timeout: Duration::from_secs(5),
            barrier_warning: Some(Duration::from_secs(30)),
            rendezvous_timeout: Duration::from_secs(60),
            restore_from: None,
            spill_dir: None,
            limits: Limits::default(),
            replicated_keys: Vec::new(),
            replica_sync_every: DEFAULT_REPLICA_SYNC_EVERY,
            replica_min_delta_norm: 0.0,
            replica_sync_after_updates: 0,
            load_watch: Some(LoadWatch::default()),
            balancer: Some(Balancer::default()),
            samplers: Vec::new(),
            sampling_seed: 0,
            intent_timing: IntentTiming::Timed,
            intent_techniques: IntentTechniques::All,
            intent_linger: true,
            share_sync_every: Duration::from_nanos(roam_core::share::DEFAULT_SHARE_SYNC_BOUND_NS),
            share_sync_updates_per_key: roam_core::share::DEFAULT_SHARE_UPDATES_PER_KEY,
            print_stats: true,
            trace_allocation: false,
            metrics_addr: None,
            metrics_hold_scrapes: None,
        }
    }

    /// Starts from the checkpoint in `dir` (see [`Config::restore_from`]).
    pub fn restore_from(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.restore_from = Some(dir.into());
        self
    }

    /// Replicates `keys` on every node (see [`Config::replicated_keys`]).
    pub fn replicate(mut self, keys: impl IntoIterator<Item = Key>) -> Self {
        self.replicated_keys.extend(keys);
        self
    }

    /// Registers a sampler (see [`Config::samplers`]); its id names it in
    /// [`crate::Worker::prepare_sample`].
    pub fn add_sampler(&mut self, spec: SamplerSpec) -> SamplerId {
        self.samplers.push(spec);
        SamplerId(self.samplers.len() as u32 - 1)
    }
}

/// Default time between replica sync rounds (100 rounds per second).
pub const DEFAULT_REPLICA_SYNC_EVERY: Duration = Duration::from_millis(10);
