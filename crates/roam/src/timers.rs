//! The node's timer thread: runs the core's timers (`poll_timeout`/`handle_timeout`) and logs
//! what they decided (balancer moves, stragglers found and recovered).
//!
//! Invariant: the thread sleeps until the deadline the core named, and only activity moves
//! deadlines later, except a barrier that begins to wait, which wakes it
//! ([`Shared::wake_timers`]); so a sleep is never late.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::runtime::Shared;
use crate::slowing::spawn_named;

/// Runs the core's timers: sleeps until the deadline the core names (or until stopped), then
/// lets the core act (heartbeats, silence timeouts, replica sync rounds, load reports, barrier
/// wait warnings). Activity only moves deadlines later, except a barrier that begins to wait,
/// which wakes this thread ([`Shared::wake_timers`]), so sleeping until the deadline read
/// before is never late.
pub(crate) fn spawn_timers(
    shared: &Arc<Shared>,
    stop: Arc<(Mutex<bool>, Condvar)>,
) -> std::io::Result<JoinHandle<()>> {
    let shared = shared.clone();
    let name = format!("roam-timers-{}", shared.rank.0);
    let slow = shared.slow_tasks.clone();
    spawn_named(name, slow.as_ref(), move || {
        loop {
            let deadline = shared.with_node(|node, _| node.poll_timeout());
            let wait = match deadline {
                Some(at) => Duration::from_nanos(at.0.saturating_sub(shared.now().0)),
                None => Duration::from_secs(1),
            };
            let mut woken = shared.timer_wake.0.lock();
            if !*woken && !*stop.0.lock() && !wait.is_zero() {
                shared.timer_wake.1.wait_for(&mut woken, wait);
            }
            *woken = false;
            drop(woken);
            if *stop.0.lock() {
                return;
            }
            let (found, decided) = shared.with_node(|node, now| {
                let before = node.straggler_events().len();
                let decided_before =
                    node.balance_decisions().len() as u64 + node.balance_decisions_dropped();
                node.handle_timeout(now);
                let decided_now =
                    node.balance_decisions().len() as u64 + node.balance_decisions_dropped();
                let new = (decided_now - decided_before) as usize;
                let decisions = node.balance_decisions();
                (
                    node.straggler_events()[before..].to_vec(),
                    decisions[decisions.len().saturating_sub(new)..].to_vec(),
                )
            });
            for d in decided {
                // Every balancer decision is logged with its evidence (also in the stats).
                let (before, after) = d.weight;
                let (buckets, bytes) = d.moves;
                let (ops_before, ops_after) = d.ops_per_round;
                tracing::info!(
                    node = shared.rank.0,
                    "balancer: {:?} {}: weight {before:.3} -> {after:.3}, {buckets} buckets \
                     ({bytes} bytes) to move; ops per round {ops_before:.0} before, \
                     {ops_after:.0} after; score {}; capacity {}",
                    d.kind,
                    d.node,
                    d.score_ns.map_or("none".into(), |(s, o)| format!(
                        "{:.2} ms against {:.2} ms",
                        s / 1e6,
                        o / 1e6
                    )),
                    d.capacity.map_or("none".into(), |(c, o)| format!(
                        "{c:.0} keys per busy second against {o:.0}"
                    )),
                );
            }
            for e in found {
                // Operators see stragglers come and go as they are decided (also in the stats).
                let (what, ms, others) = (e.node, e.score_ns / 1e6, e.others_ns / 1e6);
                // The evidence: response times seen by peers, the node's own capacity, or both.
                let mut evidence = Vec::new();
                if e.observers > 0 {
                    evidence.push(format!(
                        "answers in {ms:.2} ms against {others:.2} ms for the others (seen by {} \
                         nodes)",
                        e.observers
                    ));
                }
                if let Some((capacity, median)) = e.capacity {
                    evidence.push(format!(
                        "serves {capacity:.0} keys per busy second against {median:.0} for the \
                         others"
                    ));
                }
                let evidence = evidence.join("; ");
                if e.slow {
                    tracing::warn!(node = shared.rank.0, "{what} is a straggler: {evidence}");
                } else {
                    // Also a warning: with the default filter an operator sees the end of a
                    // straggler as surely as its start.
                    tracing::warn!(node = shared.rank.0, "{what} recovered: {evidence}");
                }
            }
            shared.close_links_lost_by_core();
        }
    })
}
