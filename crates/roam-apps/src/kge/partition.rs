//! Data clustering: the training triples partitioned by relation over all workers.
//!
//! Invariants of [`by_relation`]: every training triple goes to exactly one worker; all
//! triples of a relation go to the same worker (so relation parameters have one user, which
//! lapse mode exploits by localizing them once); the result depends only on the triples and
//! the worker count (every node computes the same partition independently, no file per
//! cluster shape as in Lapse). Balance: relations are assigned largest first, each to the
//! least-loaded worker (longest-processing-time rule), which is within 4/3 of the optimum;
//! a single relation larger than the average share necessarily leaves the others lighter.

use super::data::Triple;

/// The triples of each worker and the owner of each relation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// `triples[w]`: indices into the training triples for global worker `w`, in file order.
    pub triples: Vec<Vec<u32>>,
    /// `owner[r]`: the global worker that trains relation `r` (relations with no training
    /// triple are assigned too, to a least-loaded worker).
    pub owner: Vec<u32>,
}

impl Partition {
    /// The relations owned by global worker `w`, in id order.
    pub fn relations_of(&self, w: u32) -> Vec<u32> {
        (0..self.owner.len() as u32)
            .filter(|&r| self.owner[r as usize] == w)
            .collect()
    }
}

/// Partitions `train` (relation ids `< num_relations`) over `workers` workers by relation.
pub fn by_relation(train: &[Triple], num_relations: u32, workers: u32) -> Partition {
    let workers = workers.max(1) as usize;
    let mut counts = vec![0u64; num_relations as usize];
    for t in train {
        counts[t.r as usize] += 1;
    }
    let mut order: Vec<u32> = (0..num_relations).collect();
    order.sort_by_key(|&r| (std::cmp::Reverse(counts[r as usize]), r));
    let mut load = vec![0u64; workers];
    let mut owner = vec![0u32; num_relations as usize];
    for r in order {
        // Ties go to the lowest worker index, keeping the result deterministic.
        let w = (0..workers).min_by_key(|&w| (load[w], w)).unwrap_or(0);
        load[w] += counts[r as usize];
        owner[r as usize] = w as u32;
    }
    let mut triples = vec![Vec::new(); workers];
    for (i, t) in train.iter().enumerate() {
        triples[owner[t.r as usize] as usize].push(i as u32);
    }
    Partition { triples, owner }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    #[test]
    fn relations_are_disjoint_and_every_triple_is_covered_once() {
        let seed = 7;
        println!("seed {seed}");
        let mut rng = SmallRng::seed_from_u64(seed);
        let nr = 37;
        // Skewed relation frequencies, as in real graphs.
        let train: Vec<Triple> = (0..5_000)
            .map(|_| {
                let r = (rng.random::<f64>().powi(3) * f64::from(nr)) as u32;
                Triple::new(
                    rng.random_range(0..100),
                    r.min(nr - 1),
                    rng.random_range(0..100),
                )
            })
            .collect();
        for workers in [1, 2, 3, 4, 8] {
            let p = by_relation(&train, nr, workers);
            assert_eq!(p.triples.len(), workers as usize);
            let mut seen = vec![0u32; train.len()];
            let mut relations_seen: Vec<HashSet<u32>> = vec![HashSet::new(); workers as usize];
            for (w, idx) in p.triples.iter().enumerate() {
                for &i in idx {
                    seen[i as usize] += 1;
                    let r = train[i as usize].r;
                    assert_eq!(p.owner[r as usize], w as u32);
                    relations_seen[w].insert(r);
                }
            }
            assert!(
                seen.iter().all(|&c| c == 1),
                "each triple exactly once ({workers} workers)"
            );
            for a in 0..workers as usize {
                for b in a + 1..workers as usize {
                    assert!(
                        relations_seen[a].is_disjoint(&relations_seen[b]),
                        "workers {a} and {b} share a relation"
                    );
                }
            }
            // LPT bound: no worker above the average plus the largest relation.
            let largest = (0..nr)
                .map(|r| train.iter().filter(|t| t.r == r).count())
                .max()
                .unwrap();
            let avg = train.len().div_ceil(workers as usize);
            assert!(p.triples.iter().all(|t| t.len() <= avg + largest));
            assert_eq!(p, by_relation(&train, nr, workers), "deterministic");
        }
    }

    #[test]
    fn equal_relations_are_balanced_exactly() {
        let train: Vec<Triple> = (0..8u32)
            .flat_map(|r| (0..10).map(move |i| Triple::new(i, r, i + 1)))
            .collect();
        let p = by_relation(&train, 8, 4);
        assert!(p.triples.iter().all(|t| t.len() == 20));
        assert_eq!(p.relations_of(0).len(), 2);
    }
}
