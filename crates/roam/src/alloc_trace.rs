//! The shell side of the allocation trace (`Config::trace_allocation`): turns the core's
//! recorded arrivals ([`roam_core::trace`]) into wall-clock events, and samples this node's
//! local and remote key accesses every [`SAMPLE_EVERY`] so that the share served locally can be
//! drawn over time. Wall-clock (Unix) seconds, not the node's own clock, so that the traces of
//! several nodes line up on one time axis (as well as the hosts' clocks agree).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};
use serde::Serialize;

use crate::runtime::{NodeHandle, Shared};
use crate::stats::NodeStats;

/// Time between two samples of the access counters.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(25);

/// One change of where a key is held, as the receiving node recorded it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KeyChange {
    /// The key.
    pub key: u64,
    /// The node that held it (for a replica: that owns it).
    pub from: u32,
    /// The node that holds it from now on (this node).
    pub to: u32,
    /// When it arrived, in Unix seconds.
    pub time: f64,
    /// `move` (relocation), `replica` (a replica granted by intent sharing) or `home-move`
    /// (with its home bucket, by the balancer or a drain).
    pub change: &'static str,
}

/// This node's key accesses so far, at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AccessSample {
    /// Unix seconds.
    pub time: f64,
    /// Keys pulled or pushed by this node's workers that were served locally, so far.
    pub local_keys: u64,
    /// All keys pulled or pushed by this node's workers, so far.
    pub all_keys: u64,
}

/// What a node recorded.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AllocationTrace {
    /// This node's rank.
    pub node: u32,
    /// The keys that arrived here, in order.
    pub changes: Vec<KeyChange>,
    /// Changes not kept past the trace's size limit.
    pub dropped: u64,
    /// The access counters every [`SAMPLE_EVERY`].
    pub samples: Vec<AccessSample>,
}

/// Unix seconds now.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One sample of `shared`'s counters.
fn sample(shared: &Shared) -> AccessSample {
    let stats = NodeStats::collect(shared);
    let local = stats.local_pull_keys + stats.local_push_keys;
    AccessSample {
        time: unix_now(),
        local_keys: local,
        all_keys: local + stats.remote_pull_keys + stats.remote_push_keys,
    }
}

/// The sampler: a thread that samples until `stop` is set, into `samples`.
pub(crate) fn spawn_sampler(
    shared: &Arc<Shared>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    samples: Arc<Mutex<Vec<AccessSample>>>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let shared = shared.clone();
    std::thread::Builder::new()
        .name(format!("roam-trace-{}", shared.rank.0))
        .spawn(move || {
            loop {
                samples.lock().push(sample(&shared));
                let mut stopped = stop.0.lock();
                if !*stopped {
                    stop.1.wait_for(&mut stopped, SAMPLE_EVERY);
                }
                if *stopped {
                    return;
                }
            }
        })
}

impl NodeHandle {
    /// The allocation trace recorded so far (empty unless `Config::trace_allocation` was
    /// set), with a last sample of the access counters; empties it. Call it once the workers
    /// are done, before [`NodeHandle::shutdown`].
    pub fn take_allocation_trace(&self) -> AllocationTrace {
        let Some(samples) = &self.trace_samples else {
            return AllocationTrace {
                node: self.rank(),
                ..Default::default()
            };
        };
        let mut samples = std::mem::take(&mut *samples.lock());
        samples.push(sample(&self.shared));
        let ((events, dropped), now) = self.shared.with_node(|node, now| (node.take_trace(), now));
        // The node's clock counts from its start: `origin` is that start in Unix seconds.
        let origin = unix_now() - now.0 as f64 / 1e9;
        let changes = events
            .into_iter()
            .map(|e| KeyChange {
                key: e.key,
                from: e.from.0,
                to: e.to.0,
                time: origin + e.at.0 as f64 / 1e9,
                change: e.change.name(),
            })
            .collect();
        AllocationTrace {
            node: self.rank(),
            changes,
            dropped,
            samples,
        }
    }
}
