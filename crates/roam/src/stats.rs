//! A node's counters as a plain, serialisable snapshot (the shutdown JSON line).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use serde::Serialize;

use crate::runtime::Shared;

/// Counters of one node at one instant. Local figures are summed over its workers.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NodeStats {
    /// The node's rank.
    pub rank: u32,
    /// Nodes in the cluster.
    pub num_nodes: u32,
    /// Worker threads on this node.
    pub workers_per_node: u32,
    /// Allocation mode name.
    pub allocation: String,
    /// Whether workers accessed local keys directly.
    pub fast_local_access: bool,
    /// Emulated one-way latency per frame, µs.
    pub emulated_latency_us: u64,
    /// Keys pulled straight from the local store.
    pub local_pull_keys: u64,
    /// Pulls served entirely from the local store.
    pub local_pull_ops: u64,
    /// Keys pushed or set straight into the local store.
    pub local_push_keys: u64,
    /// Pushes and sets served entirely locally.
    pub local_push_ops: u64,
    /// Keys pulled through messages.
    pub remote_pull_keys: u64,
    /// Pulls that needed messages.
    pub remote_pull_ops: u64,
    /// Keys pushed or set through messages.
    pub remote_push_keys: u64,
    /// Pushes and sets that needed messages.
    pub remote_push_ops: u64,
    /// Keys this node served for requests that came by message.
    pub served_keys: u64,
    /// Frames sent.
    pub messages_sent: u64,
    /// Frames received.
    pub messages_received: u64,
    /// Frames and bytes sent, by frame kind (`"Want"`, `"ShareDeltas"`, …): `[frames, bytes]`,
    /// summed over links (this node's own included, as in `messages_sent`), kinds never sent
    /// left out.
    pub frames_sent_by_kind: BTreeMap<String, [u64; 2]>,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Nonsensical frames from peers that were dropped.
    pub anomalies: u64,
    /// Request frames forwarded towards a key's owner.
    pub forwards: u64,
    /// Keys that moved to this node.
    pub relocations_in: u64,
    /// Keys that moved away from this node.
    pub relocations_out: u64,
    /// Bytes of values this node sent away by relocation.
    pub relocation_bytes: u64,
    /// Keys named in localize operations issued here.
    pub localize_keys: u64,
    /// Mean time from a key's localize request to its arrival here, µs.
    pub localize_mean_us: f64,
    /// Intents signalled by this node's workers ([`crate::Worker::intent`]).
    pub intents: u64,
    /// Keys named in them.
    pub intent_keys: u64,
    /// Intents acted on (the others were still waiting for their window).
    pub intents_acted: u64,
    /// Keys that intents asked to move here (relocations decided by intent).
    pub intent_actions: u64,
    /// Intents whose start clock came before all their keys were here.
    pub late_intents: u64,
    /// Acted intents released before their start (beyond what a worker tracks).
    pub intents_unchecked: u64,
    /// Intent requests this node, as a key's owner, answered with a replica (replications
    /// decided by intent).
    pub share_grants: u64,
    /// Share-sync rounds run here (the clock of lingering interest: `roam_core` `intent/
    /// linger.rs`).
    pub share_rounds: u64,
    /// Intent requests this node, as a key's owner, answered by moving the key there
    /// (relocations decided by intent).
    pub intent_relocations: u64,
    /// Replicas granted to this node by intent.
    pub shares_in: u64,
    /// Mean time from a want to its grant here, µs.
    pub share_wait_mean_us: f64,
    /// Replicas this node dropped (their intent ended, or the owner revoked them).
    pub share_leaves: u64,
    /// Replicas this node, as owner, revoked to move a shared key.
    pub share_revokes: u64,
    /// Replicas this node turned into owned keys when their owner no longer wanted them.
    pub share_promotions: u64,
    /// Intent requests this node, as owner, kept until its own intents on the key ended.
    pub share_deferrals: u64,
    /// Deferrals decided at their deadline (this node's intents outlasted it).
    pub share_deferrals_expired: u64,
    /// Deferrals decided early: a new intent here extended the key's use past the deadline.
    pub share_deferrals_extended: u64,
    /// Bytes of share-sync frames sent (grants, deltas, values, final deltas, gradient sums).
    pub share_bytes_sent: u64,
    /// Keys whose accumulated gradient sum this node sent to their owner (per round or leave).
    pub share_grad_keys_sent: u64,
    /// Optimizer steps this node, as owner, took with a member's gradient sum.
    pub share_grad_steps: u64,
    /// How long replicas held here by intent lived (median), ms.
    pub replica_lifetime_p50_ms: f64,
    /// Same, 99th percentile, ms.
    pub replica_lifetime_p99_ms: f64,
    /// Replicas held here by intent when the stats were taken.
    pub shared_replicas: u64,
    /// Remote accesses routed by a location-cache entry.
    pub cache_hits: u64,
    /// Remote accesses without a location-cache entry.
    pub cache_misses: u64,
    /// Keys currently held by this node.
    pub keys_held: u64,
    /// Keys of a sparse key space created here on first use.
    pub keys_created: u64,
    /// Accesses of a dynamic key space refused a row here (not admitted, or no room under the
    /// row budget); they read the initializer's value.
    pub rows_rejected: u64,
    /// Updates (pushes, sets, gradients) of one key dropped because its id had no row.
    pub grads_dropped: u64,
    /// Rows of a dynamic key space evicted here (row budget or TTL).
    pub rows_evicted: u64,
    /// Rows that moved to this node, sent back to their creators because it held more than
    /// its row budget.
    pub rows_returned: u64,
    /// Evicted rows written to this node's spill file (policies with `spill`).
    pub rows_spilled: u64,
    /// Rows created again from their spilled record.
    pub rows_unspilled: u64,
    /// Spill records that could not be written or read back (logged as warnings).
    pub spill_errors: u64,
    /// Fraction of accessed keys that were served locally.
    pub local_fraction: f64,
    /// Keys replicated on every node.
    pub replicated_keys: u64,
    /// Replica sync rounds completed.
    pub replica_rounds: u64,
    /// Replicated keys whose deltas were sent to their hubs.
    pub replica_keys_sent: u64,
    /// Replicated keys whose primaries arrived from their hubs.
    pub replica_keys_received: u64,
    /// Bytes of replica-sync frames sent.
    pub replica_bytes_sent: u64,
    /// Replica sync bytes sent per round.
    pub replica_bytes_per_round: f64,
    /// Age of remote updates when they landed in this node's replicas (median), µs.
    pub replica_staleness_p50_us: f64,
    /// Same, 99th percentile, µs.
    pub replica_staleness_p99_us: f64,
    /// This node's latest view of its peers' response times (mean µs and answers in the last
    /// report period), by peer rank.
    pub peer_response_us: Vec<PeerResponse>,
    /// Time (ns) this node's core took for peers' pulls and pushes that served keys here (plus
    /// any `--slow-scope service` delay; `roam_core::load_service`).
    pub service_busy_ns: u64,
    /// Time (ns) those requests waited for the node lock.
    pub service_queue_ns: u64,
    /// Every member's serving in its latest load period, as this node heard it (its own
    /// included), with its smoothed capacity; empty without load watching.
    pub service: Vec<ServiceStat>,
    /// Stragglers this node found (and their recoveries), with the evidence.
    pub stragglers: Vec<Straggler>,
    /// Home moves the load balancer issued (at the coordinator; 0 elsewhere).
    pub balancer_moves: u64,
    /// Their estimated bytes.
    pub balancer_bytes: u64,
    /// The balancer's decisions with their evidence (at the coordinator).
    pub balance_decisions: Vec<BalanceDecisionStat>,
    /// The balancer's weight of every node it shrank (a node not named has weight 1; at the
    /// coordinator).
    pub balance_weights: Vec<BalanceWeight>,
}

/// A node's share of the buckets as the load balancer weighs it (see `roam_core::balance`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BalanceWeight {
    /// The node.
    pub node: u32,
    /// Its weight: 1 is an even share.
    pub weight: f64,
}

/// One load-balancer decision (see `roam_core::balance`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BalanceDecisionStat {
    /// Seconds since the node started.
    pub at_s: f64,
    /// `Shrink`, `Probe`, `Keep` or `Undo`.
    pub kind: String,
    /// The node whose share changed or was judged.
    pub node: u32,
    /// Its weight before and after.
    pub weight_before: f64,
    /// Its weight after.
    pub weight_after: f64,
    /// Its score (µs), if scored in the round.
    pub score_us: Option<f64>,
    /// The other nodes' median score (µs).
    pub others_us: Option<f64>,
    /// Its capacity (keys served per busy second), if capacities were compared in the round:
    /// before the change for `Shrink` and `Probe`, after it for `Keep` and `Undo`.
    pub capacity_keys_per_s: Option<f64>,
    /// The other nodes' median capacity.
    pub others_capacity_keys_per_s: Option<f64>,
    /// Operations per load round before the change.
    pub ops_before: f64,
    /// Operations per load round after it (when judged).
    pub ops_after: f64,
    /// Buckets to move.
    pub buckets: u32,
    /// Their estimated bytes.
    pub bytes: u64,
}

/// One peer's mean response time to this node's requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PeerResponse {
    /// The peer's rank.
    pub peer: u32,
    /// Mean response time, µs.
    pub mean_us: f64,
    /// Answers in the period.
    pub answers: u64,
}

/// One member's serving in its latest load period (see `roam_core::load_service`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ServiceStat {
    /// The member's rank.
    pub node: u32,
    /// Keys it served in the period.
    pub served_keys: f64,
    /// Its receiving threads' busy time with requests in the period, ms.
    pub busy_ms: f64,
    /// Time those requests waited for its node lock in the period, ms.
    pub queue_ms: f64,
    /// Keys served per second of busy time, smoothed over periods (none until a period served
    /// enough keys to tell).
    pub capacity_keys_per_s: Option<f64>,
}

/// A straggler found or recovered (see `roam_core::load`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Straggler {
    /// Seconds since the node started.
    pub at_s: f64,
    /// The straggler's rank.
    pub node: u32,
    /// True when it became a straggler, false when it recovered.
    pub slow: bool,
    /// Its score: the smallest mean response time an observer reported for it, µs.
    pub score_us: f64,
    /// The median score of the other nodes, µs.
    pub others_us: f64,
    /// Observers whose reports scored it (0: no response-time score; the capacity decided).
    pub observers: u32,
    /// Its capacity (keys served per busy second) when capacities were compared.
    pub capacity_keys_per_s: Option<f64>,
    /// The other nodes' median capacity then.
    pub others_capacity_keys_per_s: Option<f64>,
}

impl NodeStats {
    pub(crate) fn collect(shared: &Shared) -> Self {
        let node = &shared.counters;
        let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let mut stats = Self {
            rank: shared.rank.0,
            num_nodes: shared.num_nodes,
            workers_per_node: shared.workers_per_node,
            allocation: shared.allocation.to_string(),
            fast_local_access: shared.fast_local_access,
            emulated_latency_us: shared.latency_us,
            remote_pull_keys: get(&node.remote_pull_keys),
            remote_pull_ops: get(&node.remote_pull_ops),
            remote_push_keys: get(&node.remote_push_keys),
            remote_push_ops: get(&node.remote_push_ops),
            served_keys: get(&node.served_keys),
            service_busy_ns: get(&node.service_busy_ns),
            service_queue_ns: get(&node.service_queue_ns),
            messages_sent: get(&node.messages_sent),
            messages_received: get(&node.messages_received),
            bytes_sent: get(&node.bytes_sent),
            bytes_received: get(&node.bytes_received),
            anomalies: get(&node.anomalies),
            forwards: get(&node.forwards),
            relocations_in: get(&node.relocations_in),
            relocations_out: get(&node.relocations_out),
            relocation_bytes: get(&node.relocation_bytes),
            localize_keys: get(&node.localize_keys),
            localize_mean_us: match get(&node.relocations_in) {
                0 => 0.0,
                n => get(&node.relocation_wait_ns) as f64 / n as f64 / 1e3,
            },
            cache_hits: get(&node.cache_hits),
            cache_misses: get(&node.cache_misses),
            keys_held: shared.store.count_local(),
            keys_created: get(&node.keys_created),
            rows_rejected: get(&node.rows_rejected),
            grads_dropped: get(&node.grads_dropped),
            rows_evicted: get(&node.rows_evicted),
            rows_returned: get(&node.rows_returned),
            rows_spilled: get(&node.rows_spilled),
            rows_unspilled: get(&node.rows_unspilled),
            spill_errors: get(&node.spill_errors),
            replica_rounds: get(&node.replica_rounds),
            replica_keys_sent: get(&node.replica_keys_sent),
            replica_keys_received: get(&node.replica_keys_received),
            replica_bytes_sent: get(&node.replica_bytes_sent),
            share_grants: get(&node.share_grants),
            share_rounds: get(&node.share_rounds),
            intent_relocations: get(&node.intent_relocations),
            shares_in: get(&node.shares_in),
            share_wait_mean_us: match get(&node.shares_in) {
                0 => 0.0,
                n => get(&node.share_wait_ns) as f64 / n as f64 / 1e3,
            },
            share_leaves: get(&node.share_leaves),
            share_revokes: get(&node.share_revokes),
            share_promotions: get(&node.share_promotions),
            share_deferrals: get(&node.share_deferrals),
            share_deferrals_expired: get(&node.share_deferrals_expired),
            share_deferrals_extended: get(&node.share_deferrals_extended),
            share_bytes_sent: get(&node.share_bytes_sent),
            share_grad_keys_sent: get(&node.share_grad_keys_sent),
            share_grad_steps: get(&node.share_grad_steps),
            ..Self::default()
        };
        let (lifetime_p50, lifetime_p99, held) = shared.with_node(|node, _| {
            (
                node.replica_lifetime_ns(50.0),
                node.replica_lifetime_ns(99.0),
                node.shared_replicas() as u64,
            )
        });
        for peer in shared.peers.read().values() {
            peer.link
                .traffic
                .add_sent_by_kind(&mut stats.frames_sent_by_kind);
        }
        stats.replica_lifetime_p50_ms = lifetime_p50.map_or(0.0, |ns| ns as f64 / 1e6);
        stats.replica_lifetime_p99_ms = lifetime_p99.map_or(0.0, |ns| ns as f64 / 1e6);
        stats.shared_replicas = held;
        let (replicated, p50, p99, peers, stragglers, decisions, service, weights) = shared
            .with_node(|node, _| {
                (
                    node.replicated_keys().len() as u64,
                    node.replica_staleness_ns(50.0),
                    node.replica_staleness_ns(99.0),
                    node.peer_response_times(),
                    node.straggler_events().to_vec(),
                    node.balance_decisions().to_vec(),
                    node.service_stats(),
                    node.balance_weights(),
                )
            });
        stats.balance_weights = (weights.into_iter())
            .map(|(member, weight)| BalanceWeight {
                node: member.0,
                weight,
            })
            .collect();
        stats.service = service
            .into_iter()
            .map(|(member, s)| ServiceStat {
                node: member.0,
                served_keys: s.last.served_keys,
                busy_ms: s.last.busy_ns / 1e6,
                queue_ms: s.last.queue_ns / 1e6,
                capacity_keys_per_s: s.capacity,
            })
            .collect();
        stats.balancer_moves = get(&node.balancer_moves);
        stats.balancer_bytes = get(&node.balancer_bytes);
        stats.balance_decisions = decisions
            .into_iter()
            .map(|d| BalanceDecisionStat {
                at_s: shared.seconds_since_start(d.at),
                kind: format!("{:?}", d.kind),
                node: d.node.0,
                weight_before: d.weight.0,
                weight_after: d.weight.1,
                score_us: d.score_ns.map(|(s, _)| s / 1e3),
                others_us: d.score_ns.map(|(_, o)| o / 1e3),
                capacity_keys_per_s: d.capacity.map(|(c, _)| c),
                others_capacity_keys_per_s: d.capacity.map(|(_, o)| o),
                ops_before: d.ops_per_round.0,
                ops_after: d.ops_per_round.1,
                buckets: d.moves.0,
                bytes: d.moves.1,
            })
            .collect();
        stats.peer_response_us = peers
            .into_iter()
            .map(|(peer, ns, answers)| PeerResponse {
                peer: peer.0,
                mean_us: ns / 1e3,
                answers,
            })
            .collect();
        stats.stragglers = stragglers
            .into_iter()
            .map(|e| Straggler {
                at_s: shared.seconds_since_start(e.at),
                node: e.node.0,
                slow: e.slow,
                score_us: e.score_ns / 1e3,
                others_us: e.others_ns / 1e3,
                observers: e.observers,
                capacity_keys_per_s: e.capacity.map(|(c, _)| c),
                others_capacity_keys_per_s: e.capacity.map(|(_, o)| o),
            })
            .collect();
        stats.replicated_keys = replicated;
        stats.replica_bytes_per_round = match stats.replica_rounds {
            0 => 0.0,
            n => stats.replica_bytes_sent as f64 / n as f64,
        };
        stats.replica_staleness_p50_us = p50.map_or(0.0, |ns| ns as f64 / 1e3);
        stats.replica_staleness_p99_us = p99.map_or(0.0, |ns| ns as f64 / 1e3);
        for w in &shared.worker_counters {
            stats.local_pull_keys += get(&w.local_pull_keys);
            stats.local_pull_ops += get(&w.local_pull_ops);
            stats.local_push_keys += get(&w.local_push_keys);
            stats.local_push_ops += get(&w.local_push_ops);
            stats.intents += get(&w.intents);
            stats.intent_keys += get(&w.intent_keys);
            stats.intents_acted += get(&w.intents_acted);
            stats.intent_actions += get(&w.intent_actions);
            stats.late_intents += get(&w.late_intents);
            stats.intents_unchecked += get(&w.intents_unchecked);
        }
        let local = stats.local_pull_keys + stats.local_push_keys;
        let total = local + stats.remote_pull_keys + stats.remote_push_keys;
        stats.local_fraction = if total == 0 {
            0.0
        } else {
            local as f64 / total as f64
        };
        stats
    }

    /// One JSON line: `{"roam_node_stats": {...}}`.
    pub fn to_json_line(&self) -> String {
        serde_json::json!({ "roam_node_stats": self }).to_string()
    }
}
