//! The node's series, read at scrape time: every value comes from counters the node keeps
//! anyway (`NodeStats::collect`, the links' traffic and queues, the core's latency histograms),
//! so a scrape costs the node a snapshot and nothing between scrapes.
//!
//! Invariants: every family is encoded on every scrape, even when its value is 0, so that a
//! series exists from the node's first scrape on (Prometheus `rate()` needs the zero); labels
//! are a closed set (`op`, `path`, `direction`, `peer`, `result`).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use roam_core::latency::{BOUNDS_NS, LatencyOp, LatencyPath, OpLatency};

use crate::runtime::Shared;
use crate::stats::NodeStats;

type Labels<'a> = [(&'static str, &'a str)];

/// Reads one node's figures on every scrape.
pub(super) struct NodeCollector {
    shared: Arc<Shared>,
}

impl NodeCollector {
    pub(super) fn new(shared: &Arc<Shared>) -> Self {
        Self {
            shared: shared.clone(),
        }
    }
}

impl fmt::Debug for NodeCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeCollector(node {})", self.shared.rank.0)
    }
}

/// One link's figures at scrape time.
struct LinkFigures {
    peer: String,
    up: bool,
    queued: usize,
    frames: [u64; 2],
    bytes: [u64; 2],
}

/// Writes families of one type: one descriptor, then one sample per label set.
fn family<V>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: &[(&Labels<'_>, V)],
) -> fmt::Result
where
    V: prometheus_client::encoding::EncodeGaugeValue
        + prometheus_client::encoding::EncodeCounterValue,
{
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in samples {
        let sample = |mut s: prometheus_client::encoding::MetricEncoder<'_>| {
            if matches!(kind, MetricType::Counter) {
                s.encode_counter::<NoLabelSet, _, u64>(value, None)
            } else {
                s.encode_gauge(value)
            }
        };
        if labels.is_empty() {
            sample(m.encode_family(&Vec::<(&str, &str)>::new())?)?;
        } else {
            sample(m.encode_family(labels)?)?;
        }
    }
    Ok(())
}

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    family(enc, name, help, MetricType::Counter, &[(&[], v)])
}

fn counter_f(enc: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> fmt::Result {
    family(enc, name, help, MetricType::Counter, &[(&[], v)])
}

/// A gauge family with one label (`label`), one sample per `(label value, value)`.
fn gauges_by(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &'static str,
    values: &[(String, f64)],
) -> fmt::Result {
    let labels: Vec<([(&str, &str); 1], f64)> = values
        .iter()
        .map(|(l, v)| ([(label, l.as_str())], *v))
        .collect();
    let samples: Vec<(&Labels<'_>, f64)> = labels.iter().map(|(l, v)| (&l[..], *v)).collect();
    family(enc, name, help, MetricType::Gauge, &samples)
}

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> fmt::Result {
    family(enc, name, help, MetricType::Gauge, &[(&[], v)])
}

fn latency(enc: &mut DescriptorEncoder, lat: &OpLatency) -> fmt::Result {
    let mut m = enc.encode_descriptor(
        "op_latency_seconds",
        "Latency of pulls and pushes that needed messages, from issue to the last answer, by \
         path (owner: answered by the nodes asked; forwarded: some answer came via another node)",
        None,
        MetricType::Histogram,
    )?;
    for op in LatencyOp::ALL {
        for path in LatencyPath::ALL {
            let h = lat.get(op, path);
            let buckets: Vec<(f64, u64)> = BOUNDS_NS
                .iter()
                .map(|&b| b as f64 / 1e9)
                .chain([f64::INFINITY])
                .zip(h.buckets)
                .collect();
            let labels = [("op", op.name()), ("path", path.name())];
            m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                h.sum_ns as f64 / 1e9,
                h.count,
                &buckets,
                None,
            )?;
        }
    }
    Ok(())
}

impl Collector for NodeCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let shared = &self.shared;
        let s = NodeStats::collect(shared);
        let lat = shared.with_node(|node, _| node.op_latency().clone());
        let links: Vec<LinkFigures> = shared
            .peers
            .read()
            .iter()
            .filter(|(id, _)| **id != shared.rank)
            .map(|(id, p)| {
                let t = &p.link.traffic;
                let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
                LinkFigures {
                    peer: id.0.to_string(),
                    up: !p.lost.load(Ordering::Acquire) && !p.departed.load(Ordering::Acquire),
                    queued: p.link.queued(),
                    frames: [get(&t.frames_sent), get(&t.frames_received)],
                    bytes: [get(&t.bytes_sent), get(&t.bytes_received)],
                }
            })
            .collect();
        let parked: usize = shared.parked.lock().values().map(Vec::len).sum();
        let e = &mut enc;

        gauge(
            e,
            "nodes",
            "Nodes in the cluster at start",
            f64::from(s.num_nodes),
        )?;
        gauge(
            e,
            "workers",
            "Worker threads on this node",
            f64::from(s.workers_per_node),
        )?;
        family(
            e,
            "ops",
            "Pull and push operations by path (local: served from this node's store with no \
             message; remote: needed at least one message)",
            MetricType::Counter,
            &[
                (&[("op", "pull"), ("path", "local")], s.local_pull_ops),
                (&[("op", "push"), ("path", "local")], s.local_push_ops),
                (&[("op", "pull"), ("path", "remote")], s.remote_pull_ops),
                (&[("op", "push"), ("path", "remote")], s.remote_push_ops),
            ],
        )?;
        family(
            e,
            "keys",
            "Keys pulled and pushed by path (local or remote, as for roam_ops_total)",
            MetricType::Counter,
            &[
                (&[("op", "pull"), ("path", "local")], s.local_pull_keys),
                (&[("op", "push"), ("path", "local")], s.local_push_keys),
                (&[("op", "pull"), ("path", "remote")], s.remote_pull_keys),
                (&[("op", "push"), ("path", "remote")], s.remote_push_keys),
            ],
        )?;
        latency(e, &lat)?;
        gauge(
            e,
            "local_fraction",
            "Fraction of accessed keys served from the local store, since the start",
            s.local_fraction,
        )?;
        counter(
            e,
            "served_keys",
            "Keys this node served as owner for requests that arrived by message",
            s.served_keys,
        )?;
        counter(
            e,
            "forwards",
            "Request frames this node forwarded towards a key's owner",
            s.forwards,
        )?;
        family(
            e,
            "location_cache_lookups",
            "Remote accesses routed by a location-cache entry (hit) or through the home (miss)",
            MetricType::Counter,
            &[
                (&[("result", "hit")], s.cache_hits),
                (&[("result", "miss")], s.cache_misses),
            ],
        )?;
        gauge(
            e,
            "keys_held",
            "Keys this node holds now",
            s.keys_held as f64,
        )?;
        family(
            e,
            "relocations",
            "Keys that moved to (in) or away from (out) this node",
            MetricType::Counter,
            &[
                (&[("direction", "in")], s.relocations_in),
                (&[("direction", "out")], s.relocations_out),
            ],
        )?;
        counter(
            e,
            "relocation_bytes",
            "Bytes of values this node sent away by relocation",
            s.relocation_bytes,
        )?;
        gauge(
            e,
            "localize_mean_seconds",
            "Mean time from a key's localize request to its arrival here",
            s.localize_mean_us / 1e6,
        )?;
        gauge(
            e,
            "replicated_keys",
            "Keys replicated on every node",
            s.replicated_keys as f64,
        )?;
        counter(
            e,
            "replica_sync_rounds",
            "Replica sync rounds completed",
            s.replica_rounds,
        )?;
        family(
            e,
            "replica_keys",
            "Replicated keys whose deltas were sent to their hubs (sent) or whose primaries \
             arrived from them (received)",
            MetricType::Counter,
            &[
                (&[("direction", "sent")], s.replica_keys_sent),
                (&[("direction", "received")], s.replica_keys_received),
            ],
        )?;
        counter(
            e,
            "replica_bytes_sent",
            "Bytes of replica-sync frames sent",
            s.replica_bytes_sent,
        )?;
        gauge(
            e,
            "replica_staleness_p50_seconds",
            "Median age of remote updates when they landed in this node's replicas (over the \
             run; 0 before the first)",
            s.replica_staleness_p50_us / 1e6,
        )?;
        gauge(
            e,
            "replica_staleness_p99_seconds",
            "99th percentile of the same ages",
            s.replica_staleness_p99_us / 1e6,
        )?;
        gauge(
            e,
            "shared_replicas",
            "Replicas held here by intent now",
            s.shared_replicas as f64,
        )?;
        counter(
            e,
            "shares_in",
            "Replicas granted to this node by intent",
            s.shares_in,
        )?;
        counter(
            e,
            "share_bytes_sent",
            "Bytes of share-sync frames sent (grants, deltas, values)",
            s.share_bytes_sent,
        )?;
        counter(
            e,
            "anomalies",
            "Frames from peers that made no sense and were dropped",
            s.anomalies,
        )?;
        family(
            e,
            "frames",
            "Frames sent and received over all links (this node's own loopback included)",
            MetricType::Counter,
            &[
                (&[("direction", "sent")], s.messages_sent),
                (&[("direction", "received")], s.messages_received),
            ],
        )?;
        let per_peer = |i: usize, field: fn(&LinkFigures) -> [u64; 2]| {
            links
                .iter()
                .map(|l| (l.peer.as_str(), field(l)[i]))
                .collect::<Vec<_>>()
        };
        for (name, help, field) in [
            (
                "peer_frames",
                "Frames exchanged with each peer",
                (|l: &LinkFigures| l.frames) as fn(&LinkFigures) -> [u64; 2],
            ),
            (
                "peer_bytes",
                "Bytes (headers included) exchanged with each peer",
                |l: &LinkFigures| l.bytes,
            ),
        ] {
            let sent = per_peer(0, field);
            let received = per_peer(1, field);
            let labels: Vec<([(&str, &str); 2], u64)> = sent
                .iter()
                .map(|&(p, v)| ([("peer", p), ("direction", "sent")], v))
                .chain(
                    received
                        .iter()
                        .map(|&(p, v)| ([("peer", p), ("direction", "received")], v)),
                )
                .collect();
            let samples: Vec<(&Labels<'_>, u64)> =
                labels.iter().map(|(l, v)| (&l[..], *v)).collect();
            family(e, name, help, MetricType::Counter, &samples)?;
        }
        for (i, name, help) in [
            (0, "frames_sent_by_kind", "Frames sent, by frame kind"),
            (
                1,
                "frame_bytes_sent_by_kind",
                "Bytes (headers included) sent, by frame kind",
            ),
        ] {
            let labels: Vec<([(&str, &str); 1], u64)> = s
                .frames_sent_by_kind
                .iter()
                .map(|(kind, figures)| ([("kind", kind.as_str())], figures[i]))
                .collect();
            let samples: Vec<(&Labels<'_>, u64)> =
                labels.iter().map(|(l, v)| (&l[..], *v)).collect();
            family(e, name, help, MetricType::Counter, &samples)?;
        }
        let queue_labels: Vec<([(&str, &str); 1], f64)> = links
            .iter()
            .map(|l| ([("peer", l.peer.as_str())], l.queued as f64))
            .collect();
        let samples: Vec<(&Labels<'_>, f64)> =
            queue_labels.iter().map(|(l, v)| (&l[..], *v)).collect();
        family(
            e,
            "link_queue_frames",
            "Frames queued on each peer's link and not yet written (queue plus backlog)",
            MetricType::Gauge,
            &samples,
        )?;
        gauge(
            e,
            "parked_frames",
            "Frames held for nodes that have no link yet (joining)",
            parked as f64,
        )?;
        let up_labels: Vec<([(&str, &str); 1], f64)> = links
            .iter()
            .map(|l| ([("peer", l.peer.as_str())], if l.up { 1.0 } else { 0.0 }))
            .collect();
        let samples: Vec<(&Labels<'_>, f64)> =
            up_labels.iter().map(|(l, v)| (&l[..], *v)).collect();
        family(
            e,
            "peer_up",
            "1 while the link to the peer is live, 0 once it was lost or left",
            MetricType::Gauge,
            &samples,
        )?;
        gauge(
            e,
            "peers_up",
            "Peers whose links are live",
            links.iter().filter(|l| l.up).count() as f64,
        )?;
        let response: Vec<(String, f64)> = s
            .peer_response_us
            .iter()
            .map(|r| (r.peer.to_string(), r.mean_us / 1e6))
            .collect();
        gauges_by(
            e,
            "peer_response_seconds",
            "Mean response time of each peer to this node's requests in the last load-report \
             period",
            "peer",
            &response,
        )?;
        counter_f(
            e,
            "service_busy_seconds",
            "Time this node's core took for peers' pulls and pushes that served keys here \
             (plus any --slow-scope service delay)",
            s.service_busy_ns as f64 / 1e9,
        )?;
        counter_f(
            e,
            "service_queue_seconds",
            "Time peers' data requests waited for this node's lock after they were read",
            s.service_queue_ns as f64 / 1e9,
        )?;
        let capacity: Vec<(String, f64)> = (s.service.iter())
            .filter_map(|m| Some((m.node.to_string(), m.capacity_keys_per_s?)))
            .collect();
        gauges_by(
            e,
            "service_capacity_keys_per_second",
            "Each member's serving capacity as this node heard it: keys served per second of \
             busy time, smoothed over load-report periods",
            "node",
            &capacity,
        )?;
        counter(
            e,
            "balancer_moves",
            "Home moves the load balancer issued (at the coordinator)",
            s.balancer_moves,
        )?;
        counter(
            e,
            "balancer_moved_bytes",
            "Estimated bytes of the keys and records those moves carried",
            s.balancer_bytes,
        )?;
        let weights: Vec<(String, f64)> = (s.balance_weights.iter())
            .map(|w| (w.node.to_string(), w.weight))
            .collect();
        gauges_by(
            e,
            "balancer_weight",
            "The load balancer's weight of each node it shrank (1 is an even share of the \
             buckets; nodes not listed have 1; at the coordinator)",
            "node",
            &weights,
        )?;
        let m = e.encode_descriptor(
            "checkpoint_duration_seconds",
            "Time this node's worker 0 spent in each checkpoint it took part in (cut, shard \
             write, barriers)",
            None,
            MetricType::Histogram,
        )?;
        shared.checkpoints.0.encode(m)?;
        Ok(())
    }
}
