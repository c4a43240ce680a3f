//! A synthetic knowledge graph with planted structure, for scale runs and the embedded default.
//!
//! Entities are split into `clusters` latent clusters, and each entity has a popularity within
//! its cluster (Zipf, exponent 1, by a random in-cluster rank). Each relation maps every
//! cluster `c` to the target cluster `c + k_r mod clusters` (a random shift per relation:
//! shifts commute, so ComplEx's diagonal relations can represent all of them at once, with
//! `dim ≥ clusters`; random functions or permutations cannot be, and learn far slower in
//! ComplEx — measured while choosing, see the docs). A triple picks a
//! relation (Zipf, exponent 1/2, so relation sizes are skewed as in real graphs and the
//! partitioning has work to do), a head cluster uniformly, a head by popularity within it, and
//! a tail by popularity within the relation's target cluster. A model can learn this: which
//! cluster each entity is in, the shift of each relation, and popularity.
//! Triples are distinct; a random `valid` and `test` share is held out.
//!
//! Everything is drawn from one seeded generator: the same spec gives the same graph on every
//! node, which is what lets each node load data independently.

use std::collections::HashSet;

use anyhow::{Context, bail, ensure};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::data::{Graph, MAX_IDS, Triple};

/// Parameters of the generator (`--synthetic key=value,...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Entities.
    pub entities: u64,
    /// Relations.
    pub relations: u64,
    /// Distinct triples generated in total (train + valid + test).
    pub triples: u64,
    /// Latent entity clusters.
    pub clusters: u64,
    /// Held-out validation triples.
    pub valid: u64,
    /// Held-out test triples.
    pub test: u64,
    /// Generator seed.
    pub seed: u64,
}

/// The latent structure of a synthetic graph.
struct Plan {
    /// Entities of each cluster, most popular first.
    members: Vec<Vec<u32>>,
    /// `maps[r][c]`: the cluster relation `r` sends cluster `c` to (a shift).
    maps: Vec<Vec<u32>>,
}

/// The embedded default graph: small enough to train in seconds, structured enough to learn.
pub const DEFAULT_SPEC: &str = "entities=2000,relations=40,triples=60000,clusters=40";

impl Spec {
    /// Parses `key=value` pairs separated by commas; unset keys get defaults scaled from the
    /// sizes (clusters ≈ entities/20 within 2..=64, valid and test = min(triples/20, 1000)).
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let mut spec = Self {
            entities: 2000,
            relations: 40,
            triples: 60_000,
            clusters: u64::MAX,
            valid: u64::MAX,
            test: u64::MAX,
            seed: 1,
        };
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((key, value)) = part.split_once('=') else {
                bail!("--synthetic {text:?}: expected key=value, found {part:?}");
            };
            let slot = match key.trim() {
                "entities" => &mut spec.entities,
                "relations" => &mut spec.relations,
                "triples" => &mut spec.triples,
                "clusters" => &mut spec.clusters,
                "valid" => &mut spec.valid,
                "test" => &mut spec.test,
                "seed" => &mut spec.seed,
                other => bail!(
                    "--synthetic {text:?}: unknown key {other:?} (known: entities, relations, triples, clusters, valid, test, seed)"
                ),
            };
            let value: u64 = value.trim().parse().with_context(|| {
                format!(
                    "--synthetic {text:?}: value {value:?} of {key} is not a non-negative integer"
                )
            })?;
            *slot = value;
        }
        if spec.clusters == u64::MAX {
            spec.clusters = (spec.entities / 20).clamp(2, 64).min(spec.entities);
        }
        let held_out = (spec.triples / 20).min(1000);
        if spec.valid == u64::MAX {
            spec.valid = held_out;
        }
        if spec.test == u64::MAX {
            spec.test = held_out.max(1);
        }
        ensure!(
            spec.entities >= 2 && spec.entities < MAX_IDS,
            "--synthetic: entities must be in 2..{MAX_IDS}"
        );
        ensure!(
            spec.relations >= 1 && spec.relations < MAX_IDS,
            "--synthetic: relations must be in 1..{MAX_IDS}"
        );
        ensure!(
            spec.clusters >= 1 && spec.clusters <= spec.entities,
            "--synthetic: clusters must be in 1..=entities"
        );
        ensure!(spec.test >= 1, "--synthetic: test must be at least 1");
        ensure!(
            spec.triples > spec.valid + spec.test,
            "--synthetic: triples ({}) must exceed valid + test ({})",
            spec.triples,
            spec.valid + spec.test
        );
        Ok(spec)
    }

    /// The canonical text of the spec (every key), used as the dataset name.
    pub fn name(&self) -> String {
        format!(
            "synthetic:entities={},relations={},triples={},clusters={},valid={},test={},seed={}",
            self.entities,
            self.relations,
            self.triples,
            self.clusters,
            self.valid,
            self.test,
            self.seed
        )
    }

    /// Draws the latent structure (first use of the generator seeded with `seed`).
    fn plan(&self, rng: &mut SmallRng) -> Plan {
        let (ne, nr, nc) = (
            self.entities as usize,
            self.relations as usize,
            self.clusters as usize,
        );
        let mut perm: Vec<u32> = (0..ne as u32).collect();
        perm.shuffle(rng);
        // Entity perm[i] is in cluster i % nc with in-cluster rank i / nc.
        let members: Vec<Vec<u32>> = (0..nc)
            .map(|c| perm.iter().skip(c).step_by(nc).copied().collect())
            .collect();
        let maps = (0..nr)
            .map(|_| {
                let shift = rng.random_range(0..nc as u32);
                (0..nc as u32).map(|c| (c + shift) % nc as u32).collect()
            })
            .collect();
        Plan { members, maps }
    }

    /// Generates the graph.
    pub fn generate(&self) -> anyhow::Result<Graph> {
        let mut rng = SmallRng::seed_from_u64(self.seed);
        let (ne, nr) = (self.entities as usize, self.relations as usize);
        let Plan { members, maps } = self.plan(&mut rng);
        let nc = members.len();
        let cumulative = |n: usize, exponent: f64| -> Vec<f64> {
            let mut acc = 0.0;
            (0..n)
                .map(|k| {
                    acc += 1.0 / ((k + 1) as f64).powf(exponent);
                    acc
                })
                .collect()
        };
        let in_cluster: Vec<Vec<f64>> = members.iter().map(|m| cumulative(m.len(), 1.0)).collect();
        let relation_weights = cumulative(nr, 0.5);
        let draw = |cum: &[f64], rng: &mut SmallRng| -> usize {
            let x = rng.random::<f64>() * cum[cum.len() - 1];
            cum.partition_point(|&c| c <= x).min(cum.len() - 1)
        };
        let wanted = self.triples as usize;
        let mut seen = HashSet::with_capacity(wanted);
        let mut triples = Vec::with_capacity(wanted);
        let max_attempts = wanted.saturating_mul(20).max(1000);
        let mut attempts = 0;
        while triples.len() < wanted {
            attempts += 1;
            ensure!(
                attempts <= max_attempts,
                "--synthetic: could only draw {} distinct triples of {wanted} (the spec is too dense: add entities, relations or clusters)",
                triples.len()
            );
            let r = draw(&relation_weights, &mut rng);
            let hc = rng.random_range(0..nc);
            let s = members[hc][draw(&in_cluster[hc], &mut rng)];
            let tc = maps[r][hc] as usize;
            let o = members[tc][draw(&in_cluster[tc], &mut rng)];
            let t = Triple::new(s, r as u32, o);
            if seen.insert(t) {
                triples.push(t);
            }
        }
        triples.shuffle(&mut rng);
        let test = triples.split_off(triples.len() - self.test as usize);
        let valid = triples.split_off(triples.len() - self.valid as usize);
        let graph = Graph {
            num_entities: ne as u32,
            num_relations: nr as u32,
            train: triples,
            valid,
            test,
            name: self.name(),
        };
        graph.validate()?;
        Ok(graph)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_parses_with_defaults_and_rejects_nonsense() {
        let s = Spec::parse("entities=500,relations=5,triples=4000,seed=3").unwrap();
        assert_eq!((s.clusters, s.valid, s.test, s.seed), (25, 200, 200, 3));
        assert_eq!(Spec::parse(&s.name()["synthetic:".len()..]).unwrap(), s);
        for bad in [
            "entities=x",
            "colour=3",
            "entities",
            "entities=1",
            "triples=10,valid=5,test=5",
            "clusters=0",
        ] {
            assert!(Spec::parse(bad).is_err(), "{bad}");
        }
        let err = Spec::parse("foo=1").unwrap_err().to_string();
        assert!(err.contains("unknown key \"foo\""), "{err}");
    }

    #[test]
    fn generated_graph_is_deterministic_distinct_and_follows_the_plan() {
        let spec = Spec::parse("entities=300,relations=6,triples=3000,clusters=6,seed=5").unwrap();
        let g = spec.generate().unwrap();
        assert_eq!(
            (g.train.len(), g.valid.len(), g.test.len()),
            (2700, 150, 150)
        );
        let all: HashSet<Triple> = g.all().copied().collect();
        assert_eq!(all.len(), 3000, "triples are distinct");
        let again = spec.generate().unwrap();
        assert_eq!(g.train, again.train);
        // Every triple follows the plan: the tail is in the cluster the relation sends the
        // head's cluster to.
        let plan = spec.plan(&mut SmallRng::seed_from_u64(spec.seed));
        let mut cluster_of = vec![0u32; 300];
        for (c, members) in plan.members.iter().enumerate() {
            for &e in members {
                cluster_of[e as usize] = c as u32;
            }
        }
        for t in g.all() {
            let target = plan.maps[t.r as usize][cluster_of[t.s as usize] as usize];
            assert_eq!(cluster_of[t.o as usize], target, "{t:?}");
        }
        // Popularity: the most popular member of a cluster is far more frequent than the least.
        let count = |e: u32| g.all().filter(|t| t.s == e || t.o == e).count();
        let c0 = &plan.members[0];
        assert!(count(c0[0]) > 4 * count(c0[c0.len() - 1]).max(1));
    }

    #[test]
    fn too_dense_specs_fail_cleanly() {
        let err = Spec::parse("entities=2,relations=1,triples=100,clusters=1,valid=0,test=1")
            .unwrap()
            .generate();
        assert!(err.unwrap_err().to_string().contains("too dense"));
    }
}
