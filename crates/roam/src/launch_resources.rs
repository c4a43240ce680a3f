//! The per-attempt resources of `roam launch` that outlive a child: applying a straggler
//! schedule's quota changes to the cpu cgroups while the nodes run, and reporting and removing
//! the cgroups and network namespaces when an attempt ends.
//!
//! Invariants: each quota change is tried once and its failure returned, not retried; removal
//! reports every problem with the command that cleans it up later, and returns whether
//! everything is gone so that the launcher can turn a leftover into exit code 1.

use std::io::Write;
use std::time::Duration;

use parking_lot::Mutex;

use super::notice;
use crate::cgroup::Groups;
use crate::netns::Cluster;
use crate::slow_node::Tracker;

/// Writes the quota changes due at `t` after the nodes started, with a notice for each;
/// returns the changes that failed (each is tried once).
pub(super) fn apply_schedule<E: Write>(
    groups: &Groups,
    tracker: &mut Tracker,
    t: Duration,
    err: &Mutex<E>,
) -> Vec<anyhow::Error> {
    let mut failed = Vec::new();
    for (rank, factor) in tracker.due(t) {
        let written = match groups.set(rank, factor) {
            Ok(w) => w,
            Err(e) => {
                failed.push(anyhow::Error::new(e).context(format!(
                    "changing node {rank}'s cpu quota at {:.1} s",
                    t.as_secs_f64()
                )));
                continue;
            }
        };
        let what = factor.map_or_else(
            || "unthrottled".to_owned(),
            |f| format!("throttled to 1/{f} of a CPU"),
        );
        let dir = groups
            .dir(rank)
            .map_or_else(String::new, |d| d.display().to_string());
        notice(
            err,
            &format!(
                "node {rank} {what} at {:.1} s ({written} in {dir})",
                t.as_secs_f64()
            ),
        );
    }
    failed
}

/// Prints each group's throttling counters (if `report`) and removes the run's cpu cgroups,
/// reporting problems; returns whether all are gone.
pub(super) fn finish_cgroups<E: Write>(
    groups: Option<&mut Groups>,
    err: &Mutex<E>,
    report: bool,
) -> bool {
    let Some(groups) = groups else {
        return true;
    };
    for rank in groups.ranks().into_iter().filter(|_| report) {
        let Some(s) = groups.stats(rank) else {
            continue;
        };
        notice(
            err,
            &format!(
                "node {rank} cpu cgroup at exit: nr_periods={} nr_throttled={} throttled_ms={}",
                s.nr_periods,
                s.nr_throttled,
                s.throttled.as_millis()
            ),
        );
    }
    let problems = groups.destroy();
    for p in &problems {
        notice(
            err,
            &format!("cleaning up cpu cgroups: {p} (the next --slow-node run removes it)"),
        );
    }
    problems.is_empty()
}

/// Deletes the run's namespaces, if any, reporting problems; returns whether all are gone.
pub(super) fn finish_network<E: Write>(cluster: Option<&mut Cluster>, err: &Mutex<E>) -> bool {
    let Some(cluster) = cluster else {
        return true;
    };
    let problems = cluster.destroy();
    for p in &problems {
        notice(
            err,
            &format!(
                "cleaning up network namespace {}-*: {p} (the next --netns run removes it)",
                cluster.prefix()
            ),
        );
    }
    problems.is_empty()
}
