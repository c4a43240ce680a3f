//! Synthetic click data: Zipf-distributed ids over huge id spaces, labels from a hidden
//! logistic model, so that the task is learnable and test AUC means something.
//!
//! A [`Spec`] (`fields=…,ids=…,zipf=…,rows=…,test=…,signal=…,seed=…`) fully determines the
//! data (same spec, same rows on every node and every machine):
//! - each row has one id per field; the id of field `f` is `rank − 1`, the rank drawn from
//!   Zipf(`zipf`) over `1..=ids` (rejection-inversion sampling, `rand_distr::Zipf`: O(1) memory,
//!   so `ids=1e8` or more costs nothing); a ChaCha8 stream seeded by `seed`;
//! - each (field, id) has a hidden weight `u ∈ [−√3, √3]` (unit variance) computed from a hash
//!   of the seed and the pair, so no table of `ids` weights is ever materialised;
//! - the label is 1 with probability `sigmoid(signal/√fields · Σ_f u(f, id_f))`: the logit has
//!   standard deviation `signal` whatever the number of fields. Popular ids are seen often
//!   enough to learn their weights; the long tail is seen once and is noise, as in real click
//!   logs;
//! - the last `test` fraction of rows is the test split.

use std::str::FromStr;

use anyhow::{Context, bail, ensure};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Zipf};

use super::data::{Dataset, Examples, feature_key, mix};

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// Id fields per row.
    pub fields: usize,
    /// Ids per field (the Zipf support).
    pub ids: u64,
    /// Zipf exponent (0 = uniform).
    pub zipf: f64,
    /// Rows, training and test.
    pub rows: u64,
    /// Fraction of rows in the test split.
    pub test: f64,
    /// Standard deviation of the hidden logit.
    pub signal: f64,
    /// Seed.
    pub seed: u64,
}

impl Spec {
    /// The small default `roam train ctr` runs without `--data` or `--synthetic`.
    pub const EMBEDDED: &'static str =
        "fields=8,ids=1e6,zipf=1.1,rows=40000,test=0.2,signal=2,seed=1";
}

impl Default for Spec {
    fn default() -> Self {
        Self {
            fields: 26,
            ids: 100_000_000,
            zipf: 1.1,
            rows: 100_000,
            test: 0.1,
            signal: 2.0,
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
                "fields" => spec.fields = count(value)? as usize,
                "ids" => spec.ids = count(value)?,
                "zipf" => spec.zipf = value.parse()?,
                "rows" => spec.rows = count(value)?,
                "test" => spec.test = value.parse()?,
                "signal" => spec.signal = value.parse()?,
                "seed" => spec.seed = value.parse()?,
                other => bail!(
                    "unknown key {other:?} (known: fields, ids, zipf, rows, test, signal, seed)"
                ),
            }
            Ok(())
        })?;
        ensure!(
            (1..=1024).contains(&spec.fields),
            "synthetic spec {s:?}: fields must be in 1..=1024"
        );
        ensure!(
            spec.ids >= 1,
            "synthetic spec {s:?}: ids must be at least 1"
        );
        ensure!(
            spec.zipf.is_finite() && spec.zipf >= 0.0,
            "synthetic spec {s:?}: zipf must be >= 0"
        );
        ensure!(
            spec.test > 0.0 && spec.test < 1.0,
            "synthetic spec {s:?}: test must be in (0, 1)"
        );
        ensure!(
            spec.signal.is_finite() && spec.signal >= 0.0,
            "synthetic spec {s:?}: signal must be >= 0"
        );
        let test_rows = (spec.rows as f64 * spec.test) as u64;
        ensure!(
            test_rows >= 1 && test_rows < spec.rows,
            "synthetic spec {s:?}: rows = {} leaves no training or no test row",
            spec.rows
        );
        ensure!(
            spec.rows.saturating_mul(spec.fields as u64) < u64::from(u32::MAX),
            "synthetic spec {s:?}: rows × fields must be below 2^32"
        );
        Ok(spec)
    }
}

/// A whole number written as an integer or in scientific form (`1e8`).
fn count(s: &str) -> anyhow::Result<u64> {
    let s = s.replace('_', "");
    if let Ok(n) = s.parse::<u64>() {
        return Ok(n);
    }
    let f: f64 = s.parse()?;
    ensure!(
        f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f < 1.8e19,
        "not a whole number"
    );
    Ok(f as u64)
}

/// The hidden weight of `id` in `field` (unit variance, uniform).
pub fn hidden_weight(seed: u64, field: usize, id: u64) -> f64 {
    let bits = mix(feature_key(field, id) ^ mix(seed));
    let unit = (bits >> 11) as f64 / (1u64 << 53) as f64;
    (2.0 * unit - 1.0) * 3f64.sqrt()
}

/// Generates the data of `spec`.
pub fn generate(spec: &Spec) -> anyhow::Result<Dataset> {
    let zipf = Zipf::new(spec.ids as f64, spec.zipf).context("the Zipf distribution")?;
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let scale = spec.signal / (spec.fields as f64).sqrt();
    let test_rows = (spec.rows as f64 * spec.test) as u64;
    let mut splits = [Examples::new(spec.fields), Examples::new(spec.fields)];
    let mut test_logits = Vec::with_capacity(test_rows as usize);
    // The label's own stream, so that the ids do not depend on the labels drawn.
    let mut label_rng = ChaCha8Rng::seed_from_u64(mix(spec.seed ^ 0x6c61_6265_6c73));
    for row in 0..spec.rows {
        let out = &mut splits[usize::from(row >= spec.rows - test_rows)];
        let mut logit = 0.0;
        for field in 0..spec.fields {
            let id = (zipf.sample(&mut rng) as u64).clamp(1, spec.ids) - 1;
            logit += hidden_weight(spec.seed, field, id);
            out.keys.push(feature_key(field, id));
            out.end_bag()?;
        }
        let p = 1.0 / (1.0 + (-scale * logit).exp());
        if row >= spec.rows - test_rows {
            test_logits.push(logit as f32);
        }
        let u: f64 = rand::Rng::random(&mut label_rng);
        out.labels.push(u8::from(u < p));
    }
    let [train, test] = splits;
    let oracle_test_auc = super::model::auc(&test_logits, &test.labels);
    Ok(Dataset {
        field_names: (0..spec.fields).map(|f| format!("f{f}")).collect(),
        train,
        test,
        oracle_test_auc,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_parses_and_names_bad_keys() {
        let spec: Spec = "fields=3,ids=1e8,rows=1000,seed=7".parse().unwrap();
        assert_eq!(
            (spec.fields, spec.ids, spec.rows, spec.seed),
            (3, 100_000_000, 1000, 7)
        );
        assert!(Spec::EMBEDDED.parse::<Spec>().is_ok());
        for (text, needle) in [
            ("colour=1", "unknown key"),
            ("fields=0", "fields must be"),
            ("rows=1", "no training or no test row"),
            ("zipf=-1", "zipf must be"),
            ("ids=x", "ids=\"x\""),
        ] {
            let err = format!("{:#}", text.parse::<Spec>().unwrap_err());
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn same_spec_same_rows_and_skewed_ids() {
        let spec: Spec = "fields=4,ids=1e8,rows=2000,zipf=1.1,seed=3"
            .parse()
            .unwrap();
        let (a, b) = (generate(&spec).unwrap(), generate(&spec).unwrap());
        assert_eq!(a.train.keys, b.train.keys);
        assert_eq!(a.test.labels, b.test.labels);
        assert_eq!((a.train.len(), a.test.len()), (1800, 200));
        // Zipf(1.1) over 1e8: the most popular id takes several percent of a field's rows.
        let top = (0..a.train.len())
            .filter(|&r| a.train.bag(r, 0)[0] == feature_key(0, 0))
            .count();
        assert!(top > 50, "id 0 of field 0 in {top} of 1800 rows");
        let rate = a.train.click_rate();
        assert!((0.3..0.7).contains(&rate), "click rate {rate}");
    }
}
