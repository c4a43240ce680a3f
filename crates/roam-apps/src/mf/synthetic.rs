//! Synthetic rating matrices: planted low-rank factors, Gaussian noise, Zipf-skewed
//! popularity, and a held-out test split.
//!
//! A [`Spec`] (`rows=…,cols=…,rank=…,nnz=…,zipf=…,noise=…,test=…,seed=…`) fully determines the
//! matrix, so every node of a cluster generates the same one without communication:
//! - planted factors `U` (rows × rank) and `V` (cols × rank) have i.i.d. normal entries of
//!   variance `1/sqrt(rank)`, so a planted value `U_i·V_j` has variance 1;
//! - `nnz` cells are drawn with row and column chosen independently from Zipf(`zipf`)
//!   distributions over a seeded random popularity order (`zipf=0` is uniform), so popular rows
//!   are not clustered in one key range; repeated cells are merged (the first draw is kept), so
//!   under strong skew the matrix holds fewer than `nnz` cells;
//! - each cell's value is `U_i·V_j + noise·N(0,1)`, and a cell is held out for testing with
//!   probability `test`, decided by a hash of (seed, row, col), independent of draw order.
//!
//! The noise level is the best test RMSE a model of rank ≥ `rank` can reach.

use std::str::FromStr;

use anyhow::{bail, ensure};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::data::{Entry, Ratings};

/// Parameters of a synthetic matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// Rows (users).
    pub rows: u32,
    /// Columns (items).
    pub cols: u32,
    /// Rank of the planted factors.
    pub rank: u32,
    /// Cells drawn (before merging repeats).
    pub nnz: u64,
    /// Zipf exponent of row and column popularity (0 = uniform).
    pub zipf: f64,
    /// Standard deviation of the Gaussian noise.
    pub noise: f64,
    /// Fraction of cells held out for testing.
    pub test: f64,
    /// Seed of everything random in the matrix.
    pub seed: u64,
}

impl Spec {
    /// The embedded default: small enough to train in a few seconds on one core.
    pub const EMBEDDED: &'static str =
        "rows=2000,cols=1000,rank=10,nnz=200000,zipf=0.5,noise=0.1,test=0.1,seed=1";
}

impl Default for Spec {
    fn default() -> Self {
        Self {
            rows: 1000,
            cols: 1000,
            rank: 10,
            nnz: 100_000,
            zipf: 0.0,
            noise: 0.1,
            test: 0.1,
            seed: 1,
        }
    }
}

impl FromStr for Spec {
    type Err = anyhow::Error;

    /// Parses `key=value` pairs separated by commas; unnamed keys keep [`Spec::default`].
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let mut spec = Self::default();
        crate::common::parse_spec_pairs(s, |key, value| {
            match key {
                "rows" => spec.rows = value.parse()?,
                "cols" => spec.cols = value.parse()?,
                "rank" => spec.rank = value.parse()?,
                "nnz" => spec.nnz = parse_count(value)?,
                "zipf" => spec.zipf = value.parse()?,
                "noise" => spec.noise = value.parse()?,
                "test" => spec.test = value.parse()?,
                "seed" => spec.seed = value.parse()?,
                other => bail!(
                    "unknown key {other:?} (known: rows, cols, rank, nnz, zipf, noise, test, seed)"
                ),
            }
            Ok(())
        })?;
        ensure!(
            spec.rows >= 1 && spec.cols >= 1,
            "synthetic spec {s:?}: rows and cols must be at least 1"
        );
        ensure!(
            u64::from(spec.rows) + u64::from(spec.cols) <= 1 << 31,
            "synthetic spec {s:?}: rows + cols must be at most 2^31"
        );
        ensure!(
            (1..=1024).contains(&spec.rank),
            "synthetic spec {s:?}: rank must be in 1..=1024"
        );
        ensure!(
            (1..=1 << 32).contains(&spec.nnz),
            "synthetic spec {s:?}: nnz must be in 1..=2^32"
        );
        ensure!(
            spec.zipf.is_finite() && spec.zipf >= 0.0,
            "synthetic spec {s:?}: zipf must be >= 0"
        );
        ensure!(
            spec.noise.is_finite() && spec.noise >= 0.0,
            "synthetic spec {s:?}: noise must be >= 0"
        );
        ensure!(
            (0.0..1.0).contains(&spec.test),
            "synthetic spec {s:?}: test must be in [0, 1)"
        );
        Ok(spec)
    }
}

/// Accepts `1000000`, `1e6` or `1_000_000`.
fn parse_count(s: &str) -> anyhow::Result<u64> {
    let s = s.trim().replace('_', "");
    if let Ok(n) = s.parse::<u64>() {
        return Ok(n);
    }
    let f: f64 = s.parse()?;
    ensure!(
        f.is_finite() && f >= 0.0 && f.fract() == 0.0,
        "not a whole number"
    );
    Ok(f as u64)
}

/// Generates the matrix of `spec`.
pub fn generate(spec: &Spec) -> Ratings {
    let rank = spec.rank as usize;
    let sd = (spec.rank as f64).powf(-0.25);
    let mut rng = SmallRng::seed_from_u64(spec.seed);
    let mut factors = |n: u32| -> Vec<f32> {
        (0..n as usize * rank)
            .map(|_| (sd * normal(&mut rng)) as f32)
            .collect()
    };
    let u = factors(spec.rows);
    let v = factors(spec.cols);
    let mut popularity = |n: u32| -> Vec<u32> {
        let mut order: Vec<u32> = (0..n).collect();
        order.shuffle(&mut rng);
        order
    };
    let row_order = popularity(spec.rows);
    let col_order = popularity(spec.cols);
    let row_dist = Zipf::new(spec.rows, spec.zipf);
    let col_dist = Zipf::new(spec.cols, spec.zipf);
    let mut cells: Vec<u64> = (0..spec.nnz)
        .map(|_| {
            let i = row_order[row_dist.sample(&mut rng) as usize];
            let j = col_order[col_dist.sample(&mut rng) as usize];
            (u64::from(i) << 32) | u64::from(j)
        })
        .collect();
    // Merging repeats keeps a cell's value and split unique; sorting also gives each row's
    // cells together, which makes the value pass below cache-friendly.
    cells.sort_unstable();
    cells.dedup();
    let mut train = Vec::with_capacity(cells.len());
    let mut test = Vec::with_capacity((cells.len() as f64 * spec.test * 1.1) as usize);
    for cell in cells {
        let (i, j) = ((cell >> 32) as u32, cell as u32);
        let (ui, vj) = (
            &u[i as usize * rank..][..rank],
            &v[j as usize * rank..][..rank],
        );
        let planted: f32 = ui.iter().zip(vj).map(|(a, b)| a * b).sum();
        let value = planted + (spec.noise * normal(&mut rng)) as f32;
        let entry = Entry {
            row: i,
            col: j,
            value,
        };
        if unit_hash(spec.seed, cell) < spec.test {
            test.push(entry);
        } else {
            train.push(entry);
        }
    }
    Ratings {
        rows: spec.rows,
        cols: spec.cols,
        train,
        test,
        test_dropped: 0,
    }
}

/// A standard normal draw (Box–Muller).
pub(crate) fn normal(rng: &mut SmallRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A uniform number in [0, 1) from `seed` and `x` (splitmix64 finaliser).
fn unit_hash(seed: u64, x: u64) -> f64 {
    let mut z = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ x.wrapping_add(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Zipf distribution over `0..n` (index 0 most popular), by rejection-inversion (Hörmann and
/// Derflinger 1996), which needs O(1) memory and time per draw for any `n`.
#[derive(Clone, Debug)]
pub(crate) struct Zipf {
    n: f64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    threshold: f64,
}

impl Zipf {
    /// Exponent `s` (0 = uniform) over `n >= 1` items.
    pub(crate) fn new(n: u32, s: f64) -> Self {
        let mut z = Self {
            n: f64::from(n),
            s,
            h_x1: 0.0,
            h_n: 0.0,
            threshold: 0.0,
        };
        z.h_x1 = z.h_integral(1.5) - 1.0;
        z.h_n = z.h_integral(z.n + 0.5);
        z.threshold = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.s) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }

    /// One draw in `0..n`.
    pub(crate) fn sample(&self, rng: &mut SmallRng) -> u32 {
        if self.s == 0.0 {
            return rng.random_range(0..self.n as u32);
        }
        loop {
            let u = self.h_n + rng.random::<f64>() * (self.h_x1 - self.h_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.threshold || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u32 - 1;
            }
        }
    }
}

/// `ln(1 + x) / x`, continuous at 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(exp(x) - 1) / x`, continuous at 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs_and_rejects_bad_ones() {
        let s: Spec = "rows=10000,cols=5000,rank=10,nnz=1e6,zipf=1.1,noise=0.1,seed=1"
            .parse()
            .unwrap();
        assert_eq!(
            (s.rows, s.cols, s.rank, s.nnz, s.seed),
            (10000, 5000, 10, 1_000_000, 1)
        );
        assert_eq!(s.test, 0.1);
        Spec::EMBEDDED.parse::<Spec>().unwrap();
        for bad in [
            "rows=0", "rank=0", "nnz=1.5", "zipf=-1", "test=1", "colour=3", "rows", "rows=x",
        ] {
            let e = format!("{:#}", bad.parse::<Spec>().unwrap_err());
            assert!(e.contains(bad.split('=').next().unwrap()), "{bad}: {e}");
        }
    }

    #[test]
    fn generation_is_deterministic_and_split() {
        let spec: Spec = "rows=300,cols=200,rank=3,nnz=20000,zipf=1.1,noise=0.05,test=0.2,seed=7"
            .parse()
            .unwrap();
        let a = generate(&spec);
        let b = generate(&spec);
        assert_eq!(a.train, b.train);
        assert_eq!(a.test, b.test);
        let total = a.train.len() + a.test.len();
        assert!(total <= 20000 && total > 5000, "{total}");
        let frac = a.test.len() as f64 / total as f64;
        assert!((0.15..0.25).contains(&frac), "{frac}");
        let mut cells: Vec<(u32, u32)> = a
            .train
            .iter()
            .chain(&a.test)
            .map(|e| (e.row, e.col))
            .collect();
        cells.sort_unstable();
        let n = cells.len();
        cells.dedup();
        assert_eq!(cells.len(), n, "cells must be unique");
        assert!(a.train.iter().all(|e| e.row < 300 && e.col < 200));
    }

    /// Cells per row and per column, each sorted in decreasing order.
    fn ranked_counts(r: &Ratings) -> (Vec<u64>, Vec<u64>) {
        let (mut rows, mut cols) = (vec![0u64; r.rows as usize], vec![0u64; r.cols as usize]);
        for e in r.train.iter().chain(&r.test) {
            rows[e.row as usize] += 1;
            cols[e.col as usize] += 1;
        }
        rows.sort_unstable_by(|a, b| b.cmp(a));
        cols.sort_unstable_by(|a, b| b.cmp(a));
        (rows, cols)
    }

    /// The rank-frequency slope between ranks `a` and `b` (1-based) of decreasing counts: the
    /// Zipf exponent where cells are not merged.
    fn slope(counts: &[u64], a: usize, b: usize) -> f64 {
        (counts[a - 1] as f64 / counts[b - 1] as f64).ln() / (b as f64 / a as f64).ln()
    }

    #[test]
    fn zipf_skews_the_rows_and_columns_of_the_matrix() {
        // NuPS's MF data have Zipf(1.1) rows and columns; a small seeded instance.
        let matrix = |zipf: f64| {
            generate(&Spec {
                rows: 20_000,
                cols: 2_000,
                rank: 2,
                nnz: 200_000,
                zipf,
                noise: 0.1,
                test: 0.1,
                seed: 11,
            })
        };
        let mut slopes = Vec::new();
        for zipf in [0.0, 0.5, 1.1] {
            let m = matrix(zipf);
            let (rows, cols) = ranked_counts(&m);
            let cells = (m.train.len() + m.test.len()) as f64;
            let (sr, sc) = (slope(&rows, 10, 200), slope(&cols, 10, 200));
            let top: u64 = cols[..20].iter().sum();
            eprintln!(
                "zipf {zipf}: {cells} cells, rank-frequency slope 10..200 rows {sr:.3} columns \
                 {sc:.3}, hottest 1% of the columns hold {:.3} of the cells",
                top as f64 / cells
            );
            slopes.push((sr, sc, top as f64 / cells, cells));
        }
        let [
            (r0, c0, top0, cells0),
            (r5, c5, _, _),
            (r11, c11, top11, cells11),
        ] = slopes[..]
        else {
            unreachable!()
        };
        assert!(
            cells0 > 0.99 * 200_000.0,
            "few repeats without skew: {cells0}"
        );
        assert!(r0.abs() < 0.1 && c0.abs() < 0.1, "uniform: {r0} {c0}");
        assert!(top0 < 0.02, "uniform: {top0}");
        // The slope is the exponent where a row's or column's draws are distinct cells;
        // merged repeats (between hot rows and hot columns) flatten it somewhat.
        assert!(r0 < r5 && r5 < r11 && c0 < c5 && c5 < c11);
        for s in [r11, c11] {
            assert!((0.75..1.2).contains(&s), "zipf 1.1: slope {s}");
        }
        assert!(top11 > 0.25, "zipf 1.1: the hottest 1% hold {top11}");
        assert!(
            cells11 < 0.9 * 200_000.0,
            "zipf 1.1 merges repeats: {cells11}"
        );
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let mut rng = SmallRng::seed_from_u64(3);
        for (n, s) in [
            (1, 1.1),
            (10, 0.0),
            (1000, 1.1),
            (1000, 1.0),
            (1000, 0.5),
            (1000, 3.0),
        ] {
            let z = Zipf::new(n, s);
            let mut counts = vec![0u32; n as usize];
            for _ in 0..100_000 {
                counts[z.sample(&mut rng) as usize] += 1;
            }
            if n >= 1000 {
                assert!(
                    counts[0] > counts[1] && counts[1] > counts[9],
                    "{s}: {:?}",
                    &counts[..10]
                );
                // P(1)/P(2) = 2^s.
                let ratio = f64::from(counts[0]) / f64::from(counts[1]);
                assert!(
                    (ratio / 2f64.powf(s) - 1.0).abs() < 0.1,
                    "{s}: ratio {ratio}"
                );
            }
        }
    }
}
