//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

/// A cloneable in-memory sink for the launcher's relayed output.
#[derive(Clone, Default)]
pub struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Capture {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// Starts an `n`-node cluster on loopback in this process, each node built by `make` (the
/// cluster fields, token and a default of one worker per node are filled in).
pub fn cluster(n: u32, make: impl Fn() -> roam::Config + Sync) -> Vec<roam::NodeHandle> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let make = &make;
                scope.spawn(move || {
                    let mut cfg = make();
                    cfg.cluster = roam::cluster_env::ClusterOverrides {
                        rank: Some(rank),
                        num_nodes: Some(n),
                        coordinator: Some(format!("127.0.0.1:{port}")),
                    };
                    cfg.token = Some("test-token".into());
                    cfg.workers_per_node = Some(cfg.workers_per_node.unwrap_or(1));
                    cfg.rendezvous_timeout = std::time::Duration::from_secs(20);
                    roam::NodeHandle::start(cfg).expect("node starts")
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
