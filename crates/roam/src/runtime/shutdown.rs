//! How a node leaves: [`NodeHandle::shutdown`] (the final barrier, the stats line, the
//! metrics hold) and the teardown both it and `Drop` run (`close`: goodbyes on every link,
//! then joining the senders, readers and the node's other threads).
//!
//! Invariants:
//! - `close` runs once (`finished`), whichever of `shutdown` and `Drop` comes first.
//! - The shutting-down flag is set before the links are listed, so no link is added after the
//!   goodbyes went out (`peers::add_peer` adds none after it).
//! - Goodbyes are flushed before any socket is shut, and readers are joined only after the
//!   senders: a peer's reader ends on our goodbye, ours on theirs (or their loss, which the
//!   still running timers detect).

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::Duration;

use roam_core::wire::{Frame, Kind};
use roam_core::{OpError, ReqId, WorkerId};

use super::NodeHandle;
use crate::stats::NodeStats;

impl NodeHandle {
    /// Leaves the cluster cleanly: waits until every node has called `shutdown` (so no peer
    /// still needs this node's keys), says goodbye, closes links and joins the node's threads.
    /// A node that was drained skips that barrier (it is no member any more); a server-only
    /// (joined) node first waits until it is drained or the cluster finished
    /// ([`NodeHandle::wait_until_done`]), and passes no barrier either.
    /// Prints the node's counters as one JSON line on stdout (unless [`Config::print_stats`]
    /// is off) and returns them.
    pub fn shutdown(mut self) -> Result<NodeStats, OpError> {
        let barrier = if self.shared.elastic.joined {
            self.shared.wait_until_done()
        } else if self.shared.elastic.is_drained() {
            Ok(())
        } else {
            let control = WorkerId(self.shared.workers_per_node);
            let req = self
                .shared
                .with_node(|node, now| node.issue_node_barrier(now, control));
            self.shared.wait_result(control, req).map(drop)
        };
        let stats = NodeStats::collect(&self.shared);
        if self.print_stats {
            // A closed stdout (`| head`) must not panic the shutdown: the stats are returned.
            use std::io::Write;
            let _ = writeln!(std::io::stdout().lock(), "{}", stats.to_json_line());
        }
        self.close();
        if let Some((server, hold, limit)) = self.metrics.as_ref().filter(|m| m.1 > 0) {
            // Links are closed (peers need not wait for this node) and the figures are final:
            // let Prometheus collect them before the process exits.
            let rank = self.shared.rank.0;
            tracing::info!(
                node = rank,
                scrapes = hold,
                "metrics: holding until scraped"
            );
            let seen = server.hold(*hold, *limit);
            if seen < *hold {
                tracing::warn!(
                    node = rank,
                    "metrics: scraped {seen} of {hold} times within {} s; exiting anyway",
                    limit.as_secs()
                );
            }
        }
        barrier.map(|()| stats)
    }

    fn close(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let shared = &self.shared;
        // Set before the links are listed: `peers::add_peer` adds none after it.
        shared.shutting_down.store(true, Ordering::Release);
        let links = shared.links();
        for link in links.iter().filter(|l| l.peer != shared.rank) {
            link.enqueue(Frame::control(Kind::Goodbye, shared.rank, ReqId(0), 0));
            let _ = link.flush();
            link.close();
        }
        for link in links.iter().filter(|l| l.peer == shared.rank) {
            link.close();
        }
        // Our goodbyes are out once the senders end; readers end on the peers' goodbyes (or
        // their loss, which the still running timers detect within the peer timeout).
        let (extra_senders, extra_readers) = shared.elastic.take_threads();
        for sender in self.senders.drain(..).chain(extra_senders) {
            let _ = sender.join();
        }
        if shared.elastic.is_drained() || (shared.elastic.joined && !shared.is_member()) {
            // A drained (or never admitted) node is no member: the others say goodbye only
            // when they finish, so it ends its readers itself (once drained, every member's
            // last frame to it has arrived).
            for link in &links {
                shared.end_reader(link.peer);
            }
        }
        for reader in self.readers.drain(..).chain(extra_readers) {
            let _ = reader.join();
        }
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        self.shared.wake_timers();
        for link in &links {
            link.shutdown_socket();
        }
        if let Some(addr) = self.acceptor_addr {
            // Wake the acceptor out of `accept`; it sees the shutdown flag and exits.
            let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for NodeHandle {
    fn drop(&mut self) {
        self.close();
    }
}
