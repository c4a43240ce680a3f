//! Per-node counters.
//!
//! Counters are relaxed atomics: exact once the node is quiet, approximate while it runs. Worker
//! threads keep their local-access counts in their own [`WorkerCounters`] (one writer each, so no
//! cache line bounces between cores on the hot path); the node sums them when asked.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: AtomicU64,)*
        }

        impl $name {
            /// `(name, value)` of every counter, in declaration order.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

counters! {
    /// Counters of one node's protocol and transport.
    NodeCounters {
        /// Keys of pulls this node sent to other nodes (or, without fast local access, to itself).
        remote_pull_keys,
        /// Pull operations that needed at least one message.
        remote_pull_ops,
        /// Keys of pushes and sets sent by message.
        remote_push_keys,
        /// Push and set operations that needed at least one message.
        remote_push_ops,
        /// Keys this node served for requests that arrived by message.
        served_keys,
        /// Keys served by peers' pulls and pushes whose time is in `service_busy_ns`
        /// (`load_service.rs`; added by the shells with the time).
        service_keys,
        /// Wall time (ns) the shell's receiving threads spent on those pulls and pushes, from
        /// reading them to the end of their handling (added by the shells, which have the
        /// clock).
        service_busy_ns,
        /// Time (ns) those frames waited for the node lock after they were read.
        service_queue_ns,
        /// Frames sent (including to itself without fast local access).
        messages_sent,
        /// Frames received.
        messages_received,
        /// Bytes sent, headers included.
        bytes_sent,
        /// Bytes received, headers included.
        bytes_received,
        /// Frames from peers that made no sense (unknown request, wrong sizes) and were dropped.
        anomalies,
        /// Request frames this node forwarded towards a key's owner.
        forwards,
        /// Keys of a sparse key space created here on first use.
        keys_created,
        /// Accesses of a dynamic key space refused a row here (not admitted, or no room under
        /// the budget): they read the initializer's value.
        rows_rejected,
        /// Updates (pushes, sets, gradients) of one key dropped because its id has no row.
        grads_dropped,
        /// Rows of a dynamic key space evicted here (budget or TTL).
        rows_evicted,
        /// Rows that moved here, sent back to their creators because this node held more
        /// than its row budget (`dynamic.rs`).
        rows_returned,
        /// Evicted rows written to the node's spill (`spill.rs`).
        rows_spilled,
        /// Rows created again from their spilled record.
        rows_unspilled,
        /// Spill records that could not be written or read back (see `Warning::Spill`).
        spill_errors,
        /// Keys that moved to this node (relocations in).
        relocations_in,
        /// Keys that moved away from this node (relocations out).
        relocations_out,
        /// Bytes of values sent away by relocations.
        relocation_bytes,
        /// Nanoseconds from localize request to arrival, summed over keys that arrived.
        relocation_wait_ns,
        /// Keys named in localize operations issued here.
        localize_keys,
        /// Buckets whose home moved to this node.
        homes_moved_in,
        /// Frames (or parts of frames) held here while a bucket's move to this node completed.
        held_frames,
        /// Remote accesses routed by a location-cache entry.
        cache_hits,
        /// Remote accesses with no location-cache entry (routed through the home node).
        cache_misses,
        /// Replica sync rounds completed here.
        replica_rounds,
        /// Share-sync rounds run here (intent-made replicas; the clock of the linger,
        /// `intent/linger.rs`).
        share_rounds,
        /// The node's clock: the largest clock of its workers (`Front::advance_clock` calls of
        /// the furthest one; set with `fetch_max`, not added to). The steps of a TTL in steps.
        worker_clock,
        /// Replicated keys whose deltas this node sent to their hubs.
        replica_keys_sent,
        /// Replicated keys whose primaries this node received from their hubs.
        replica_keys_received,
        /// Bytes of replica-sync frames sent (deltas and, at hubs, primaries).
        replica_bytes_sent,
        /// Home moves the load balancer issued (at the coordinator).
        balancer_moves,
        /// Estimated bytes of those moves.
        balancer_bytes,
        /// Keys shared with this node by intent (replicas granted here).
        shares_in,
        /// Nanoseconds from a want to the grant, summed over keys granted here.
        share_wait_ns,
        /// Intent requests this node, as owner, answered with a replica (replications decided).
        share_grants,
        /// Intent requests this node, as owner, answered by moving the key (relocations
        /// decided).
        intent_relocations,
        /// Replicas held by intent that this node dropped (intent ended, or revoked).
        share_leaves,
        /// Replicas this node, as owner, revoked to move a shared key.
        share_revokes,
        /// Replicas this node turned into owned keys when their owner no longer wanted them.
        share_promotions,
        /// Intent requests this node, as owner, kept until its own intents on the key end
        /// (deferrals, `share/defer.rs`).
        share_deferrals,
        /// Deferrals decided at their deadline because this node's intents had not ended yet
        /// (then decided as without deferral).
        share_deferrals_expired,
        /// Deferrals decided early because a new intent here extended the key's use past their
        /// deadline (then decided as without deferral).
        share_deferrals_extended,
        /// Bytes of share-sync frames sent (deltas, values, grants, final deltas and
        /// accumulated gradients).
        share_bytes_sent,
        /// Keys whose accumulated gradient sum this node, as a member, sent to their owner
        /// (one per key per sync round or leave: stateful optimizers only).
        share_grad_keys_sent,
        /// Optimizer steps this node, as owner, took with a member's gradient sum.
        share_grad_steps,
    }
}

counters! {
    /// Local-access counters of one worker thread (only that thread writes them).
    WorkerCounters {
        /// Keys pulled straight from the local store.
        local_pull_keys,
        /// Pull operations served entirely locally.
        local_pull_ops,
        /// Keys pushed or set straight into the local store.
        local_push_keys,
        /// Push and set operations served entirely locally.
        local_push_ops,
        /// Samples drawn (`pull_sample`).
        sampled_keys,
        /// Samples of the `local` schemes that found no key held here and were read remotely.
        sample_fallbacks,
        /// Intents signalled (`intent`).
        intents,
        /// Keys named in them.
        intent_keys,
        /// Intents acted on (each exactly once; the others are still waiting for their window).
        intents_acted,
        /// Keys that intents asked to move here (relocations decided by intent).
        intent_actions,
        /// Intents whose start clock came before all their keys were here.
        late_intents,
        /// Acted intents too many to track for the late check.
        intents_unchecked,
    }
}

/// Adds `n` to a counter that only the calling thread writes (a plain load and store: no
/// read-modify-write on the hot path).
#[inline]
pub fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// Adds `n` to a counter shared by several threads.
#[inline]
pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}
