//! The NuPS modes of `kge` (`nups`, `nups-replicate-only`): which keys are replicated on every
//! node, and the replication figures of the report.
//!
//! What is replicated follows NuPS's kge app (`determine_hotspot_keys`): keys ranked by their
//! number of occurrences in the training triples (an entity counts once per triple it is the
//! subject or the object of, a relation once per triple), all relations first. NuPS replicates
//! relations unless the data is clustered by relation; its Wikidata5M runs were not, and its
//! untuned N = 900 there was the 828 relations plus the 72 most frequent entities. Here every
//! relation is replicated too (a relation is used by every scored triple of a positive, and
//! replicas make the initial relation localize unnecessary), and the entities accessed at least
//! `--replicate-alpha` (default 100) times as often as the mean model key
//! ([`roam::choose::above_mean`]) or the `--replicate-top N` most frequent entities
//! ([`roam::choose::top_n`]).
//!
//! Why 100: NuPS's untuned heuristic replicates the keys accessed far more often than the
//! mean; its MF setting (1 M Zipf(1.1) columns, 10 M Zipf(1.1) rows, 1 B distinct cells)
//! replicated 755 columns. The columns with at least 100× the mean count number about 760 in
//! that matrix, those with at least 1× about 107,000 (docs/workloads-mf.md, "NuPS modes").
//!
//! Uniform negatives are not counted: they add the same expected number of accesses to every
//! entity (under the exact sampling schemes; `local` draws only entities held on the node).
//! Every node loads the whole graph and computes the same counts, hence the same set;
//! [`crate::replication::fingerprint`] lets the job check that at start-up.

use roam::Key;
use serde_json::json;

use super::data::Graph;

pub use crate::replication::Options;

/// The replicated model keys of a job (empty outside the NuPS modes).
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Replicated keys, sorted.
    pub keys: Vec<Key>,
    /// Per model key (entities, then relations): whether it is replicated.
    pub replicated: Vec<bool>,
    /// Replicated entities.
    pub entities: usize,
    /// Replicated relations.
    pub relations: usize,
    /// Share of the training accesses of model keys that go to replicated keys: per positive,
    /// s, o, r and the 2N uniform negatives (the negatives at their expected value).
    pub access_fraction: f64,
}

impl Plan {
    /// No replication: every key is placed by the mode.
    pub fn none(graph: &Graph) -> Self {
        Self {
            replicated: vec![false; model_keys(graph)],
            ..Self::default()
        }
    }

    /// The keys to replicate for `graph` under `opts`, with `neg_ratio` negatives per side.
    pub fn choose(graph: &Graph, opts: &Options, neg_ratio: usize) -> Self {
        let ne = u64::from(graph.num_entities);
        let counts = counts(graph);
        let indexed = || counts.iter().enumerate().map(|(k, &c)| (k as Key, c));
        let entities: Vec<Key> = match opts.replicate_top {
            Some(n) => roam::choose::top_n(indexed().take(ne as usize), n),
            None => roam::choose::above_mean(indexed(), counts.len() as u64, opts.replicate_alpha)
                .into_iter()
                .filter(|&k| k < ne)
                .collect(),
        };
        let mut replicated = vec![false; counts.len()];
        for &k in &entities {
            replicated[k as usize] = true;
        }
        replicated[ne as usize..].fill(true);
        let keys: Vec<Key> = (0..counts.len() as Key)
            .filter(|&k| replicated[k as usize])
            .collect();
        let triples = graph.train.len() as f64;
        let n = neg_ratio as f64;
        let positive: u64 = keys.iter().map(|&k| counts[k as usize]).sum();
        let negative = 2.0 * n * triples * entities.len() as f64 / ne.max(1) as f64;
        let access_fraction = (positive as f64 + negative) / (triples * (3.0 + 2.0 * n)).max(1.0);
        Self {
            entities: entities.len(),
            relations: graph.num_relations as usize,
            keys,
            replicated,
            access_fraction,
        }
    }

    /// Whether model key `key` is replicated.
    pub fn is_replicated(&self, key: Key) -> bool {
        self.replicated.get(key as usize).copied().unwrap_or(false)
    }
}

/// KGE's sync period when neither `--sync-every-ms` nor `--sync-updates-per-key` is given:
/// 1 ms, not roam's 10. Under the server-side AdaGrad a replicated key takes one step per hub
/// round with the round's summed gradient, so fewer rounds are fewer steps: on lapse-toy
/// (2 × 2 workers, 4 epochs, 10 seeds) test MRR was 0.461 (0.400–0.523) at 10 ms and 0.479
/// (0.432–0.502) at 1 ms, single 0.501 (docs/workloads-kge.md, "Server-side AdaGrad").
pub const SYNC_EVERY_MS: f64 = 1.0;

/// `opts` with [`SYNC_EVERY_MS`] as the period if it sets no sync option.
pub fn with_sync_default(opts: &Options) -> Options {
    let mut opts = opts.clone();
    if opts.sync_every_ms.is_none() && opts.sync_updates_per_key.is_none() {
        opts.sync_every_ms = Some(SYNC_EVERY_MS);
    }
    opts
}

/// Entities plus relations.
fn model_keys(graph: &Graph) -> usize {
    graph.num_entities as usize + graph.num_relations as usize
}

/// Occurrences of every model key in the training triples (entities, then relations).
pub fn counts(graph: &Graph) -> Vec<u64> {
    let ne = graph.num_entities as usize;
    let mut counts = vec![0u64; model_keys(graph)];
    for t in &graph.train {
        counts[t.s as usize] += 1;
        counts[t.o as usize] += 1;
        counts[ne + t.r as usize] += 1;
    }
    counts
}

pub use crate::replication::{COUNTERS, node_counters};

/// The `replication` object of the report's settings, from the plan and the cluster sums of
/// [`node_counters`] over `nodes` nodes. Rounds are per node; bytes per round are per node
/// and round (both directions of the sync: deltas to hubs, values from them); staleness is the
/// mean over the nodes that measured any of each node's percentile.
pub fn report(plan: &Plan, opts: &Options, sums: &[u64], nodes: u32) -> serde_json::Value {
    let fields = json!({
        "replicated_keys": plan.keys.len(),
        "replicated_entities": plan.entities,
        "replicated_relations": plan.relations,
        "access_fraction": plan.access_fraction,
    });
    opts.report(fields, sums, nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kge::data::Triple;

    fn graph() -> Graph {
        // Entity 0 is in every triple, entity 1 in two; 6 entities, 2 relations.
        let t = |s, r, o| Triple::new(s, r, o);
        Graph {
            num_entities: 6,
            num_relations: 2,
            train: vec![t(0, 0, 1), t(0, 1, 2), t(3, 0, 0), t(0, 0, 4), t(1, 1, 0)],
            valid: Vec::new(),
            test: vec![t(5, 0, 0)],
            name: "test".into(),
        }
    }

    #[test]
    fn relations_always_and_entities_by_frequency() {
        let g = graph();
        assert_eq!(counts(&g), [5, 2, 1, 1, 1, 0, 3, 2]);
        // 15 occurrences over 8 keys: mean 1.875.
        let p = Plan::choose(&g, &Options::choosing(2.0, None), 1);
        assert_eq!(p.keys, [0, 6, 7], "only entity 0 has >= 3.75");
        assert_eq!((p.entities, p.relations), (1, 2));
        // Positives: entity 0 (5) + relations (5) of 15; negatives: 2 per triple, 1/6 of them.
        let expected = (10.0 + 2.0 * 5.0 / 6.0) / (5.0 * 5.0);
        assert!((p.access_fraction - expected).abs() < 1e-12);
        let p = Plan::choose(&g, &Options::choosing(1.0, None), 1);
        assert_eq!(p.keys, [0, 1, 6, 7]);
        let p = Plan::choose(&g, &Options::choosing(1.0, Some(3)), 1);
        assert_eq!(p.keys, [0, 1, 2, 6, 7], "top 3 entities, ties by key");
        assert!(p.is_replicated(2) && !p.is_replicated(3) && p.is_replicated(7));
        assert!(!Plan::none(&g).is_replicated(7));
        let p = Plan::choose(&g, &Options::choosing(1e9, None), 1);
        assert_eq!(p.keys, [6, 7], "relations even when no entity qualifies");
    }
}
