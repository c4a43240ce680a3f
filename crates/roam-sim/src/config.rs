//! Configuration of a simulation: cluster shape, network model, worker pacing and bounds.
//!
//! Invariant: a `SimConfig` fully determines a run together with the calls made on the
//! [`crate::Sim`]; there is no other source of randomness or time.

use roam_core::wire::Limits;
use roam_core::{Key, KeySpace, Partitioning};

/// Everything a [`crate::Sim`] is built from. Times are virtual nanoseconds.
///
/// Build with [`SimConfig::new`] and adjust with the `with_*` methods:
///
/// ```
/// use roam_core::{Key, KeySpace, Partitioning};
/// use roam_sim::{Sim, SimConfig};
///
/// let cfg = SimConfig::new(3, 2, KeySpace::uniform(16, 2).unwrap())
///     .with_seed(7)
///     .with_partitioning(Partitioning::Hash)
///     .with_fast_local_access(false);
/// let sim = Sim::new(cfg);
/// assert_eq!(sim.seed(), 7);
/// ```
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Number of nodes (at least one).
    pub nodes: u32,
    /// Worker threads per node (at least one).
    pub workers_per_node: u32,
    /// The key space.
    pub space: KeySpace,
    /// How keys are assigned to home nodes.
    pub partitioning: Partitioning,
    /// Whether workers access local keys directly in the store (true) or through messages to
    /// their own node (false).
    pub fast_local_access: bool,
    /// Whether keys can move (`Op::Localize`); false is static allocation.
    pub dynamic: bool,
    /// Whether nodes keep location caches.
    pub location_caches: bool,
    /// The core's heartbeats and silence timeouts (`None`: only broken links reveal a lost
    /// peer). With it, nodes' timers are events of the run while any worker has work left.
    pub liveness: Option<roam_core::Liveness>,
    /// Barrier wait warnings every this many ns (`None`: off); timer events of the run like
    /// `liveness`'s.
    pub barrier_warn_every: Option<u64>,
    /// Keys replicated on every node and their sync period (`None`: nothing replicated). With
    /// it, nodes' sync rounds are timer events of the run while any worker has work left.
    pub replication: Option<roam_core::Replication>,
    /// Samplers every node registers (`Op::Sample` names them by index).
    pub samplers: Vec<roam_core::SamplerSpec>,
    /// Response-time reports and straggler detection (`None`: off). With it, nodes' report
    /// timers are events of the run while any worker has work left.
    pub load: Option<roam_core::LoadWatch>,
    /// Stragglers: every frame a listed node sends takes this many ns longer than its drawn
    /// delay (its answers come late, and so do its own requests, as from a slow machine).
    pub slow_nodes: Vec<(roam_core::NodeId, u64)>,
    /// The virtual time (ns) at which every slow node recovers (`u64::MAX`: never).
    pub slow_until: u64,
    /// Virtual service cost (ns) of each key a node serves for a peer's pull or push, added to
    /// its `service_busy_ns` counter as the TCP shell adds measured time
    /// (`roam_core::load_service`); 0: no service time is counted.
    pub service_ns_per_key: u64,
    /// Nodes whose service costs this many times [`SimConfig::service_ns_per_key`] (until
    /// [`SimConfig::slow_until`]): slow servers whose frames are not late in themselves.
    pub slow_service: Vec<(roam_core::NodeId, u64)>,
    /// The core's load balancer (acts with `load`), or `None`.
    pub balancer: Option<roam_core::Balancer>,
    /// When workers act on their intents.
    pub intent_timing: roam_core::IntentTiming,
    /// What acting on an intent may do (move, share, or both).
    pub intent_techniques: roam_core::IntentTechniques,
    /// Whether interest lingers past short intents (`roam_core::NodeConfig::intent_linger`).
    pub intent_linger: bool,
    /// Time between share-sync rounds (virtual ns; with a work clock, the longest).
    pub share_sync_ns: u64,
    /// The share-sync work clock: a round after this many key-updates per shared key (0: off;
    /// `roam_core::ShareSync::updates_per_key`).
    pub share_updates_per_key: u64,
    /// How many of the nodes (the highest ids) start outside the cluster, as servers without
    /// workers that join with [`crate::Sim::start_join`].
    pub joiners: u32,
    /// Seed of the single random number generator of the run.
    pub seed: u64,
    /// Smallest one-way delay of a frame, in ns.
    pub min_delay: u64,
    /// Largest one-way delay of a frame, in ns (inclusive).
    pub max_delay: u64,
    /// Smallest pause of a worker between two operations, in ns.
    pub min_think: u64,
    /// Largest pause of a worker between two operations, in ns (inclusive).
    pub max_think: u64,
    /// Probability that sending a frame on a link between two different nodes breaks that
    /// connection (the frame and everything in flight on it are lost and both ends are told the
    /// other is gone). Self-links never break this way.
    pub drop_probability: f64,
    /// Size limits applied when decoding delivered frames.
    pub limits: Limits,
    /// Bound on the steps of one [`crate::Sim::run_until_idle`] call.
    pub max_steps: u64,
    /// Whether to check after every step that no key is held by two nodes at once
    /// ([`crate::Sim::check_single_copy`]); a violation panics with the seed.
    pub check_invariants: bool,
}

impl SimConfig {
    /// A configuration with `nodes` nodes of `workers_per_node` workers over `space`, range
    /// partitioning, fast local access, seed 0, 1–50 µs link delays, 0–2 µs worker pauses, no
    /// loss, default limits, a bound of one million steps and invariant checks after every step.
    pub fn new(nodes: u32, workers_per_node: u32, space: KeySpace) -> Self {
        Self {
            nodes,
            workers_per_node,
            space,
            partitioning: Partitioning::Range,
            fast_local_access: true,
            dynamic: false,
            location_caches: false,
            liveness: None,
            barrier_warn_every: None,
            replication: None,
            samplers: Vec::new(),
            load: None,
            slow_nodes: Vec::new(),
            slow_until: u64::MAX,
            service_ns_per_key: 0,
            slow_service: Vec::new(),
            balancer: None,
            intent_timing: roam_core::IntentTiming::Timed,
            intent_techniques: roam_core::IntentTechniques::All,
            intent_linger: true,
            share_sync_ns: roam_core::share::DEFAULT_SHARE_SYNC_NS,
            share_updates_per_key: 0,
            joiners: 0,
            seed: 0,
            min_delay: 1_000,
            max_delay: 50_000,
            min_think: 0,
            max_think: 2_000,
            drop_probability: 0.0,
            limits: Limits::default(),
            max_steps: 1_000_000,
            check_invariants: true,
        }
    }

    /// Sets the seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets the partitioning.
    pub fn with_partitioning(mut self, partitioning: Partitioning) -> Self {
        self.partitioning = partitioning;
        self
    }

    /// Sets whether local keys bypass the protocol.
    pub fn with_fast_local_access(mut self, fast: bool) -> Self {
        self.fast_local_access = fast;
        self
    }

    /// Turns on the core's failure detection (heartbeats, silence timeouts) in virtual time.
    pub fn with_liveness(mut self, liveness: roam_core::Liveness) -> Self {
        self.liveness = Some(liveness);
        self
    }

    /// Turns on barrier wait warnings ([`roam_core::Warning::BarrierWait`]) every `ns`.
    pub fn with_barrier_warning(mut self, ns: u64) -> Self {
        self.barrier_warn_every = Some(ns);
        self
    }

    /// Turns on response-time reports and straggler detection in virtual time.
    pub fn with_load_watch(mut self, watch: roam_core::LoadWatch) -> Self {
        self.load = Some(watch);
        self
    }

    /// Makes `node` a straggler: its frames take `extra_ns` longer (see
    /// [`SimConfig::slow_nodes`]).
    pub fn with_slow_node(mut self, node: roam_core::NodeId, extra_ns: u64) -> Self {
        self.slow_nodes.push((node, extra_ns));
        self
    }

    /// Counts `ns_per_key` of virtual service time per key served (see
    /// [`SimConfig::service_ns_per_key`]).
    pub fn with_service_cost(mut self, ns_per_key: u64) -> Self {
        self.service_ns_per_key = ns_per_key;
        self
    }

    /// Makes `node` serve `factor` times slower (see [`SimConfig::slow_service`]).
    pub fn with_slow_service(mut self, node: roam_core::NodeId, factor: u64) -> Self {
        self.slow_service.push((node, factor));
        self
    }

    /// Makes the last `joiners` nodes start outside the cluster, as servers without workers
    /// that join when [`crate::Sim::start_join`] says (see [`SimConfig::joiners`]).
    pub fn with_joiners(mut self, joiners: u32) -> Self {
        self.joiners = joiners;
        self
    }

    /// Makes every slow node recover at virtual time `ns` (its frames take their drawn delay
    /// from then on).
    pub fn with_slow_until(mut self, ns: u64) -> Self {
        self.slow_until = ns;
        self
    }

    /// Turns on the core's load balancer (it acts on load rounds: needs
    /// [`SimConfig::with_load_watch`]).
    pub fn with_balancer(mut self, balancer: roam_core::Balancer) -> Self {
        self.balancer = Some(balancer);
        self
    }

    /// Replicates `keys` on every node, synchronised every `sync_every_ns` virtual ns (see
    /// `roam_core::replica`). The checkers skip these keys: they are only eventually
    /// consistent.
    pub fn with_replication(mut self, keys: Vec<Key>, sync_every_ns: u64) -> Self {
        self.replication = Some(roam_core::Replication {
            keys,
            sync_every_ns,
            min_delta_norm: 0.0,
            sync_after_updates: 0,
        });
        self
    }

    /// Starts a replica sync round also after `updates` key-updates (the work clock, see
    /// `roam_core::Replication::sync_after_updates`; after [`SimConfig::with_replication`]).
    pub fn with_sync_after_updates(mut self, updates: u64) -> Self {
        self.replication
            .as_mut()
            .expect("with_replication first")
            .sync_after_updates = updates;
        self
    }

    /// Background rounds leave replica deltas below this L2 norm pending (after
    /// [`SimConfig::with_replication`]).
    pub fn with_min_delta_norm(mut self, min_norm: f32) -> Self {
        self.replication
            .as_mut()
            .expect("with_replication first")
            .min_delta_norm = min_norm;
        self
    }

    /// Whether interest lingers past short intents (default on; off: the ablation).
    pub fn with_intent_linger(mut self, on: bool) -> Self {
        self.intent_linger = on;
        self
    }

    /// When workers act on their intents (`Op::Intent`).
    pub fn with_intent_timing(mut self, timing: roam_core::IntentTiming) -> Self {
        self.intent_timing = timing;
        self
    }

    /// What acting on an intent may do (`Op::Intent`), and the share-sync period (ns).
    pub fn with_intent_techniques(
        mut self,
        techniques: roam_core::IntentTechniques,
        share_sync_ns: u64,
    ) -> Self {
        self.intent_techniques = techniques;
        self.share_sync_ns = share_sync_ns;
        self
    }

    /// Runs share-sync rounds by the work clock too: after `updates_per_key` key-updates per
    /// shared key (0: by time only).
    pub fn with_share_work_clock(mut self, updates_per_key: u64) -> Self {
        self.share_updates_per_key = updates_per_key;
        self
    }

    /// Enables dynamic allocation (relocation with `Op::Localize`).
    pub fn with_dynamic(mut self, dynamic: bool) -> Self {
        self.dynamic = dynamic;
        self
    }

    /// Enables location caches.
    pub fn with_location_caches(mut self, caches: bool) -> Self {
        self.location_caches = caches;
        self
    }

    /// Sets the range of one-way frame delays (ns, inclusive).
    pub fn with_delay(mut self, min: u64, max: u64) -> Self {
        assert!(min <= max, "min delay {min} above max delay {max}");
        self.min_delay = min;
        self.max_delay = max;
        self
    }

    /// Sets the range of worker pauses between operations (ns, inclusive).
    pub fn with_think(mut self, min: u64, max: u64) -> Self {
        assert!(
            min <= max,
            "min think time {min} above max think time {max}"
        );
        self.min_think = min;
        self.max_think = max;
        self
    }

    /// Sets the probability that a frame breaks its connection (see
    /// [`SimConfig::drop_probability`]).
    pub fn with_drop_probability(mut self, p: f64) -> Self {
        assert!(
            (0.0..=1.0).contains(&p),
            "drop probability {p} is not in [0, 1]"
        );
        self.drop_probability = p;
        self
    }

    /// Sets the decoding limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets whether invariants are checked after every step.
    pub fn with_invariant_checks(mut self, on: bool) -> Self {
        self.check_invariants = on;
        self
    }

    /// Sets the step bound of [`crate::Sim::run_until_idle`].
    pub fn with_max_steps(mut self, max_steps: u64) -> Self {
        self.max_steps = max_steps;
        self
    }
}
