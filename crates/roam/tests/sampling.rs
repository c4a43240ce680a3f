//! Statistical tests of the sampling schemes (NuPS) over TCP on loopback.
//!
//! - `naive`, `preloc` and `pool` keep the target distribution: over 10^6 draws on a two-node
//!   cluster with dynamic allocation, a chi-square goodness-of-fit test at significance
//!   [`SIGNIFICANCE`] against a uniform and a Zipf-like weighted target (support with stride 3).
//! - `local` and `local:next` do not: their total-variation distance to the target is measured on
//!   2, 4 and 8 nodes under static hash partitioning, printed as a table (`--nocapture`), and
//!   checked against the distribution each scheme should produce given the keys a node holds
//!   (computed exactly below).
//! - (The API's properties, distinct keys without replacement and the refusals, are tested in
//!   `sampling_api.rs`; the helpers both use are in `sampling_support`.)
//!
//! Every sampled value is checked to be its key's value (`[key, -key]`, set beforehand).
//!
//! Seeds: every test prints the seed it runs with. The default is fixed (derived from
//! [`DEFAULT_SEED`] and the test's name), so a run is reproducible; `ROAM_SAMPLING_SEED=<u64>`
//! runs every test with that seed (to replay a printed one) and `ROAM_SAMPLING_SEED=random`
//! with a fresh one (printed). Each chi-square test fails by chance
//! with probability [`SIGNIFICANCE`] for a random seed.

mod common;
mod sampling_support;

use std::collections::HashMap;

use common::cluster;
use roam::{Allocation, Key, SamplerId, SamplerSpec, Scheme};
use roam_core::sampling::{DEFAULT_GROUP_DRAWS, LOCAL_SCAN, LOCAL_TRIES};
use sampling_support::*;
use statrs::distribution::{ChiSquared, ContinuousCDF};

/// A chi-square goodness-of-fit result.
#[derive(Clone, Copy, Debug)]
struct Fit {
    statistic: f64,
    df: u64,
}

impl Fit {
    /// The probability of a statistic at least this large under the null hypothesis.
    fn p_value(self) -> f64 {
        ChiSquared::new(self.df as f64).unwrap().sf(self.statistic)
    }

    /// Independent tests combined: their statistics and degrees of freedom add up.
    fn combine(fits: &[Self]) -> Self {
        Self {
            statistic: fits.iter().map(|f| f.statistic).sum(),
            df: fits.iter().map(|f| f.df).sum(),
        }
    }
}

/// Bins of consecutive support positions such that each bin expects at least 5 of `n` draws
/// (a short remainder joins the last bin): the bin of each position.
fn bins(probs: &[f64], n: f64) -> Vec<usize> {
    let mut bin_of = Vec::with_capacity(probs.len());
    let (mut bin, mut expected) = (0, 0.0);
    for &p in probs {
        if expected >= 5.0 {
            bin += 1;
            expected = 0.0;
        }
        bin_of.push(bin);
        expected += n * p;
    }
    if expected < 5.0 && bin > 0 {
        for b in bin_of.iter_mut().filter(|b| **b == bin) {
            *b = bin - 1;
        }
    }
    bin_of
}

/// Pearson's statistic of `counts` against `probs`, binned by `bin_of`.
fn chi_square(counts: &[u64], probs: &[f64], bin_of: &[usize]) -> Fit {
    let n: u64 = counts.iter().sum();
    let num_bins = bin_of.last().map_or(0, |b| b + 1);
    let (mut observed, mut expected) = (vec![0.0; num_bins], vec![0.0; num_bins]);
    for ((&c, &p), &b) in counts.iter().zip(probs).zip(bin_of) {
        observed[b] += c as f64;
        expected[b] += n as f64 * p;
    }
    let statistic = observed
        .iter()
        .zip(&expected)
        .map(|(o, e)| (o - e) * (o - e) / e)
        .sum();
    Fit {
        statistic,
        df: num_bins as u64 - 1,
    }
}

/// Total-variation distance between the empirical distribution of `counts` and `probs`.
fn tv_counts(counts: &[u64], probs: &[f64]) -> f64 {
    let n = counts.iter().sum::<u64>() as f64;
    0.5 * counts
        .iter()
        .zip(probs)
        .map(|(&c, &p)| (c as f64 / n - p).abs())
        .sum::<f64>()
}

fn tv(q: &[f64], p: &[f64]) -> f64 {
    0.5 * q.iter().zip(p).map(|(a, b)| (a - b).abs()).sum::<f64>()
}

// ---------------------------------------------------------------------------------------------
// naive, preloc, pool: the target distribution, exactly.

/// Draws 10^6 samples (half per node, on two nodes under dynamic allocation) from a uniform, a
/// weighted and a weighted target with zero weights under `scheme`, and tests their fit.
fn fits_the_target(test: &str, scheme: &str) {
    let seed = seed(test);
    let scheme: Scheme = scheme.parse().unwrap();
    let targets = [
        ("uniform", uniform()),
        ("weighted", weighted()),
        ("weighted with zeros", weighted_with_zeros()),
    ];
    let mut cfg = config(Allocation::Dynamic, seed);
    let ids: Vec<SamplerId> = targets
        .iter()
        .map(|(_, d)| cfg.add_sampler(SamplerSpec::new(d.clone(), scheme)))
        .collect();
    // Pool: a node's samples come out group after group, each group `reuse` copies of
    // `DEFAULT_GROUP_DRAWS` draws; a node draws whole groups only (see below).
    let reuse = match scheme {
        Scheme::Pool { reuse, .. } => reuse as usize,
        _ => 1,
    };
    let group = DEFAULT_GROUP_DRAWS * reuse;
    let per_node = (DRAWS / 2).div_ceil(group) * group;
    let nodes = cluster(2, || cfg.clone());
    // streams[target][node]: the keys node drew, in order.
    let mut streams: Vec<Vec<Vec<Key>>> = vec![Vec::new(); targets.len()];
    std::thread::scope(|scope| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|node| {
                let ids = &ids;
                scope.spawn(move || {
                    let w = node.worker(0).unwrap();
                    set_values(node, &w);
                    let drawn: Vec<Vec<Key>> =
                        ids.iter().map(|&id| draw(&w, id, per_node)).collect();
                    w.barrier().unwrap();
                    drawn
                })
            })
            .collect();
        for h in handles {
            for (t, stream) in h.join().unwrap().into_iter().enumerate() {
                streams[t].push(stream);
            }
        }
    });
    for ((name, dist), per_node_streams) in targets.iter().zip(&streams) {
        let probs = probabilities(dist);
        let len = probs.len();
        // All samples, and (pool) the draws behind them, per support position.
        let (mut all, mut draws) = (vec![0u64; len], vec![0u64; len]);
        for stream in per_node_streams {
            count(dist.support(), stream, &mut all);
            if reuse == 1 {
                continue;
            }
            // pool:U hands out every draw of a group exactly U times before the next group
            // starts (crates/roam-core/src/sampling/pool.rs: a group is U shuffled copies of
            // its draws; postponing swaps samples within the group; with replacement no sample
            // is refused, so no group is merged into the next). So the samples are correlated
            // and a chi-square test of all of them would be off by a factor U: each bin's
            // observed and expected counts are both U times those of the draws, and so is
            // Pearson's statistic. Checked here: within every group of a node's stream each
            // key occurs a multiple of U times; the draws (multiplicity / U) are independent
            // and tested below, and the statistic of all samples divided by U must equal theirs.
            for chunk in stream.chunks(group) {
                assert_eq!(chunk.len(), group, "whole groups only");
                let mut in_group: HashMap<Key, usize> = HashMap::new();
                for &key in chunk {
                    *in_group.entry(key).or_default() += 1;
                }
                for (key, uses) in in_group {
                    assert_eq!(
                        uses % reuse,
                        0,
                        "{scheme}: key {key} handed out {uses} times"
                    );
                    let i = dist.support().position(key).unwrap() as usize;
                    draws[i] += (uses / reuse) as u64;
                }
            }
        }
        let n: u64 = all.iter().sum();
        assert_eq!(n, 2 * per_node as u64);
        let impossible: u64 = all
            .iter()
            .zip(&probs)
            .filter(|(_, p)| **p == 0.0)
            .map(|(c, _)| c)
            .sum();
        assert_eq!(
            impossible, 0,
            "{scheme} {name}: samples of zero-weight keys"
        );
        let fit = if reuse == 1 {
            chi_square(&all, &probs, &bins(&probs, n as f64))
        } else {
            let n_draws = n / reuse as u64;
            assert_eq!(draws.iter().sum::<u64>(), n_draws);
            let bin_of = bins(&probs, n_draws as f64);
            let fit = chi_square(&draws, &probs, &bin_of);
            let of_all = chi_square(&all, &probs, &bin_of);
            let scaled = of_all.statistic / reuse as f64;
            assert!(
                (scaled - fit.statistic).abs() <= 1e-9 * fit.statistic.max(1.0),
                "{scheme} {name}: statistic of all samples / U = {scaled}, of the draws {}",
                fit.statistic
            );
            eprintln!(
                "{test}: {scheme} {name}: {n_draws} draws × U = {reuse} \
                 (chi-square of all samples {:.1}, / U = {scaled:.3})",
                of_all.statistic
            );
            fit
        };
        let p = fit.p_value();
        eprintln!(
            "{test}: {scheme} {name}: {n} samples ({} independent draws), chi-square {:.3} on {} \
             df, p = {p:.4} (seed {seed})",
            n / reuse as u64,
            fit.statistic,
            fit.df
        );
        assert!(
            p >= SIGNIFICANCE,
            "{scheme} {name}: p = {p} < {SIGNIFICANCE} (chi-square {:.3} on {} df; replay with \
             ROAM_SAMPLING_SEED={seed})",
            fit.statistic,
            fit.df
        );
    }
    let relocated: u64 = nodes.iter().map(|n| n.stats().relocations_in).sum();
    eprintln!("{test}: {scheme}: {relocated} relocations");
    if matches!(scheme, Scheme::Preloc | Scheme::Pool { .. }) {
        assert!(relocated > 0, "{scheme} localizes the keys it draws");
    }
    shutdown(nodes);
}

#[test]
fn naive_fits_the_target() {
    fits_the_target("naive", "naive");
}

#[test]
fn preloc_fits_the_target() {
    fits_the_target("preloc", "preloc");
}

#[test]
fn pool_fits_the_target() {
    fits_the_target("pool:16", "pool:16");
}

#[test]
fn pool_without_reuse_fits_the_target() {
    fits_the_target("pool:1", "pool:1");
}

#[test]
fn strict_pool_fits_the_target() {
    fits_the_target("pool:64:strict", "pool:64:strict");
}

// ---------------------------------------------------------------------------------------------
// local, local:next: the deviation from the target.

/// The distribution `local` (`next == false`) or `local:next` produces on a node holding the
/// support positions `held`, for target `p` (see crates/roam-core/src/sampling/front.rs).
fn local_distribution(p: &[f64], held: &[bool], next: bool) -> Vec<f64> {
    let len = p.len();
    let mut q = vec![0.0; len];
    if next {
        // The first held position at or after the drawn one (cyclically), within LOCAL_SCAN
        // positions; none: the drawn one, read remotely.
        let span = (len as u64).min(LOCAL_SCAN) as usize;
        for (i, &pi) in p.iter().enumerate() {
            let target = (0..span).map(|s| (i + s) % len).find(|&j| held[j]);
            q[target.unwrap_or(i)] += pi;
        }
    } else {
        // Up to LOCAL_TRIES independent draws, the first held one taken; none: the first draw.
        let local: f64 = p
            .iter()
            .zip(held)
            .filter(|(_, h)| **h)
            .map(|(p, _)| p)
            .sum();
        let miss = 1.0 - local;
        let tries = LOCAL_TRIES as i32;
        for (i, &pi) in p.iter().enumerate() {
            q[i] = if held[i] {
                pi * (1.0 - miss.powi(tries)) / local
            } else {
                pi * miss.powi(tries - 1)
            };
        }
    }
    q
}

/// One node's samples under one local scheme.
struct NodeSamples {
    counts: Vec<u64>,
    held: Vec<bool>,
    /// Samples of keys not held here (the documented fallback after LOCAL_TRIES misses).
    remote: u64,
}

/// One row of the locality table.
struct Row {
    nodes: u32,
    target: &'static str,
    scheme: Scheme,
    tv_mean: f64,
    tv_min: f64,
    tv_max: f64,
    theory_mean: f64,
    /// Largest |measured - predicted| over the nodes, and its allowed bound there.
    worst_gap: f64,
    worst_tolerance: f64,
    cluster_tv: f64,
    cluster_theory: f64,
    remote: u64,
    remote_expected: f64,
    fit: Fit,
}

fn locality_rows(nodes_n: u32, seed: u64) -> Vec<Row> {
    let targets = [("uniform", uniform()), ("weighted", weighted())];
    let schemes = [Scheme::Local { next: false }, Scheme::Local { next: true }];
    let mut cfg = config(Allocation::StaticHash, seed);
    let mut samplers = Vec::new();
    for (name, dist) in &targets {
        for &scheme in &schemes {
            let id = cfg.add_sampler(SamplerSpec::new(dist.clone(), scheme));
            samplers.push((*name, dist, scheme, id));
        }
    }
    let per_node = DRAWS / nodes_n as usize;
    let nodes = cluster(nodes_n, || cfg.clone());
    // results[node][sampler]
    let results: Vec<Vec<NodeSamples>> = std::thread::scope(|scope| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|node| {
                let samplers = &samplers;
                scope.spawn(move || {
                    let w = node.worker(0).unwrap();
                    set_values(node, &w);
                    // Under static allocation a node holds exactly the keys it is home of.
                    let directory = w.directory();
                    let mut buf = [0.0f32; VALUE_LEN];
                    let held: Vec<bool> = (0..SUPPORT.len)
                        .map(|i| {
                            let key = SUPPORT.key(i);
                            let home = directory.home(key).0 == node.rank();
                            let local = w.pull_if_local(key, &mut buf).unwrap();
                            assert_eq!(home, local, "node {}: key {key}", node.rank());
                            local
                        })
                        .collect();
                    let out = samplers
                        .iter()
                        .map(|&(_, dist, _, id)| {
                            let stream = draw(&w, id, per_node);
                            let mut counts = vec![0; SUPPORT.len as usize];
                            count(dist.support(), &stream, &mut counts);
                            let remote = stream
                                .iter()
                                .filter(|&&k| !held[SUPPORT.position(k).unwrap() as usize])
                                .count() as u64;
                            NodeSamples {
                                counts,
                                held: held.clone(),
                                remote,
                            }
                        })
                        .collect();
                    w.barrier().unwrap();
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    shutdown(nodes);
    samplers
        .iter()
        .enumerate()
        .map(|(s, &(target, dist, scheme, _))| {
            let next = matches!(scheme, Scheme::Local { next: true });
            let p = probabilities(dist);
            let (mut tvs, mut theories, mut fits) = (Vec::new(), Vec::new(), Vec::new());
            let (mut worst_gap, mut worst_tolerance) = (0.0f64, 0.0);
            let (mut remote, mut remote_expected) = (0, 0.0);
            let mut cluster_counts = vec![0u64; p.len()];
            let mut cluster_q = vec![0.0; p.len()];
            for node in &results {
                let ns = &node[s];
                let n = ns.counts.iter().sum::<u64>() as f64;
                let q = local_distribution(&p, &ns.held, next);
                let (measured, theory) = (tv_counts(&ns.counts, &p), tv(&q, &p));
                // |TV(q̂, p) - TV(q, p)| ≤ TV(q̂, q), whose mean is at most
                // ½ Σ sd(q̂_k) = ½ Σ sqrt(q_k (1 - q_k) / n); one sample moves it by at most
                // 1/n, so (McDiarmid) it exceeds its mean by t with probability
                // ≤ exp(-2 n t²): t = sqrt(ln(10^6) / 2n) for one in a million.
                let tolerance = 0.5 * q.iter().map(|&x| (x * (1.0 - x) / n).sqrt()).sum::<f64>()
                    + (1e6f64.ln() / (2.0 * n)).sqrt();
                let gap = (measured - theory).abs();
                if gap - tolerance > worst_gap - worst_tolerance || tvs.is_empty() {
                    (worst_gap, worst_tolerance) = (gap, tolerance);
                }
                tvs.push(measured);
                theories.push(theory);
                fits.push(chi_square(&ns.counts, &q, &bins(&q, n)));
                remote += ns.remote;
                remote_expected += q
                    .iter()
                    .zip(&ns.held)
                    .filter(|(_, h)| !**h)
                    .map(|(x, _)| x * n)
                    .sum::<f64>();
                for (c, x) in cluster_counts.iter_mut().zip(&ns.counts) {
                    *c += x;
                }
                for (c, x) in cluster_q.iter_mut().zip(&q) {
                    *c += x / results.len() as f64;
                }
            }
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            Row {
                nodes: nodes_n,
                target,
                scheme,
                tv_mean: mean(&tvs),
                tv_min: tvs.iter().copied().fold(f64::INFINITY, f64::min),
                tv_max: tvs.iter().copied().fold(0.0, f64::max),
                theory_mean: mean(&theories),
                worst_gap,
                worst_tolerance,
                cluster_tv: tv_counts(&cluster_counts, &p),
                cluster_theory: tv(&cluster_q, &p),
                remote,
                remote_expected,
                fit: Fit::combine(&fits),
            }
        })
        .collect()
}

/// `local` and `local:next` on 2, 4 and 8 nodes (static hash partitioning), uniform and weighted
/// targets, 10^6 samples per configuration (10^6 / nodes per node): the total-variation distance
/// of each node's samples to the target, against the exact prediction from the keys the node
/// holds (for both schemes it is 1 - P(held keys), less the tiny fallback mass of `local`; its
/// mean over the nodes is 1 - 1/nodes whatever the target), and of the whole cluster's samples.
#[test]
fn local_schemes_deviate_as_predicted() {
    let seed = seed("local");
    let rows: Vec<Row> = [2, 4, 8]
        .into_iter()
        .flat_map(|n| locality_rows(n, seed))
        .collect();
    eprintln!(
        "\nTotal-variation distance to the target, {DRAWS} samples per row (static-hash, \
         seed {seed}):"
    );
    eprintln!(
        "| nodes | target   | scheme     | TV per node: mean (min–max) | predicted mean | \
         TV all nodes' samples (predicted) | remote samples (expected) | fit to prediction |"
    );
    eprintln!("|---|---|---|---|---|---|---|---|");
    let mut failures = Vec::new();
    for r in &rows {
        let p = r.fit.p_value();
        eprintln!(
            "| {} | {:8} | {:10} | {:.4} ({:.4}–{:.4}) | {:.4} | {:.4} ({:.4}) | {} ({:.1}) | \
             p = {p:.3} |",
            r.nodes,
            r.target,
            r.scheme.to_string(),
            r.tv_mean,
            r.tv_min,
            r.tv_max,
            r.theory_mean,
            r.cluster_tv,
            r.cluster_theory,
            r.remote,
            r.remote_expected,
        );
        let what = format!("{} nodes, {} {}", r.nodes, r.target, r.scheme);
        if r.worst_gap > r.worst_tolerance {
            failures.push(format!(
                "{what}: a node's TV is {:.4} off the prediction (tolerance {:.4})",
                r.worst_gap, r.worst_tolerance
            ));
        }
        if p < SIGNIFICANCE {
            failures.push(format!(
                "{what}: samples do not fit the predicted distribution: chi-square {:.1} on {} \
                 df, p = {p}",
                r.fit.statistic, r.fit.df
            ));
        }
        // Every sample is a key held by the sampling node, but for `local`'s fallback (no held
        // key in LOCAL_TRIES draws), whose rate is predicted; `local:next` scans the whole
        // support (1000 ≤ LOCAL_SCAN positions), so it never falls back.
        let bound = r.remote_expected + 6.0 * r.remote_expected.sqrt() + 3.0;
        if (r.remote as f64) > bound {
            failures.push(format!(
                "{what}: {} samples of keys not held by the sampling node, {:.1} expected",
                r.remote, r.remote_expected
            ));
        }
        if matches!(r.scheme, Scheme::Local { next: true }) && r.remote > 0 {
            failures.push(format!("{what}: {} samples not held here", r.remote));
        }
        let mean_prediction = 1.0 - 1.0 / f64::from(r.nodes);
        if (r.theory_mean - mean_prediction).abs() > 1e-3 {
            failures.push(format!(
                "{what}: predicted mean TV {:.4}, 1 - 1/nodes = {mean_prediction:.4}",
                r.theory_mean
            ));
        }
    }
    eprintln!();
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Without replacement, and the refusals.
