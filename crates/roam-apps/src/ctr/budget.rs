//! `roam train ctr`'s per-node memory budget (issue #17): `--max-rows N` and `--max-bytes N`
//! make the key space dynamic with that row budget (`roam::DynamicPolicy::max_rows`,
//! `max_bytes`: LRU eviction by a clock), and `--spill-dir D` keeps every evicted row in a
//! spill file per node under `D` (`DynamicPolicy::spill`, `roam::Config::spill_dir`), from
//! which its next use takes it back, trained.
//!
//! Invariant: a budget needs `--spill-dir`. ctr keeps its MLP's weights and the run's counters
//! in the same key space as the embeddings (`ctr/mod.rs`); an evicted MLP key or counter that
//! came back as the initializer's zeros would silently break the model and the report, so the
//! budget is only offered as a cache over the spill, which loses nothing.

use std::path::PathBuf;

use anyhow::bail;
use roam::{Config, DynamicPolicy};

/// The budget options (flattened into `ctr::Args`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Budget {
    /// Most rows (embedding rows, MLP keys and counters alike) each node creates and holds;
    /// colder rows are evicted to the spill file (needs --spill-dir). E.g. 100000 or 1e5.
    #[arg(long, value_parser = parse_count)]
    pub max_rows: Option<u64>,
    /// Most bytes of rows (values and optimizer state, 4 bytes a float) each node holds: a row
    /// budget of max-bytes / record bytes (with --max-rows too, the smaller). E.g. 64MiB,
    /// 500k, 1e9 (needs --spill-dir).
    #[arg(long, value_parser = parse_bytes)]
    pub max_bytes: Option<u64>,
    /// Keep evicted rows in a spill file per node in this directory
    /// (`roam-spill-node-<rank>.bin`, emptied at start; checkpoints include its rows).
    #[arg(long)]
    pub spill_dir: Option<PathBuf>,
}

impl Budget {
    /// Whether a row budget is asked for.
    pub fn is_set(&self) -> bool {
        self.max_rows.is_some() || self.max_bytes.is_some()
    }

    /// Sets `cfg`'s dynamic policy and spill directory from the options.
    pub fn configure(&self, cfg: &mut Config) -> anyhow::Result<()> {
        let budget = self.is_set();
        if budget && self.spill_dir.is_none() {
            bail!(
                "--max-rows and --max-bytes need --spill-dir: ctr keeps its MLP weights and \
                 counters in the same key space as the embeddings, and an evicted one must come \
                 back as it was"
            );
        }
        if budget || self.spill_dir.is_some() {
            cfg.dynamic = Some(DynamicPolicy {
                max_rows: self.max_rows,
                max_bytes: self.max_bytes,
                spill: true,
                ..DynamicPolicy::default()
            });
            cfg.spill_dir.clone_from(&self.spill_dir);
        }
        Ok(())
    }
}

/// A positive count: an integer, or a whole number in scientific notation (`1e6`).
fn parse_count(text: &str) -> Result<u64, String> {
    let n = whole(text)
        .ok_or_else(|| format!("{text:?} is not a whole number of rows (e.g. 100000 or 1e5)"))?;
    ensure_positive(n, text)
}

/// A positive byte count: a count with an optional binary (`KiB`, `MiB`, `GiB`) or decimal
/// (`k`, `M`, `G`, `kB`, `MB`, `GB`) unit.
fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: u64 = match unit {
        "" | "B" => 1,
        "k" | "K" | "kB" | "KB" => 1_000,
        "M" | "MB" => 1_000_000,
        "G" | "GB" => 1_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?} (use B, kB, MB, GB, KiB, MiB or GiB)"
            ));
        }
    };
    let n = whole(number)
        .ok_or_else(|| format!("{text:?} is not a byte count (e.g. 64MiB, 500k or 1e9)"))?;
    let bytes = n
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))?;
    ensure_positive(bytes, text)
}

fn whole(text: &str) -> Option<u64> {
    let text = text.trim();
    if let Ok(n) = text.parse::<u64>() {
        return Some(n);
    }
    let x: f64 = text.parse().ok()?;
    (x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x < 1.8e19).then_some(x as u64)
}

fn ensure_positive(n: u64, text: &str) -> Result<u64, String> {
    if n == 0 {
        return Err(format!("{text:?}: the budget must be at least 1"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_bytes_parse_with_units_and_bad_ones_are_named() {
        assert_eq!(parse_count("1000"), Ok(1000));
        assert_eq!(parse_count("1e5"), Ok(100_000));
        assert!(parse_count("0").unwrap_err().contains("at least 1"));
        assert!(
            parse_count("-3")
                .unwrap_err()
                .contains("not a whole number")
        );
        assert!(parse_count("1.5").is_err());
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("500k"), Ok(500_000));
        assert_eq!(parse_bytes("1e9"), Ok(1_000_000_000));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(
            parse_bytes("3 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(
            parse_bytes("99999999999GiB")
                .unwrap_err()
                .contains("too large")
        );
        assert!(parse_bytes("0MiB").unwrap_err().contains("at least 1"));
    }

    #[test]
    fn a_budget_needs_a_spill_dir() {
        let mut cfg = Config::sparse(4);
        let budget = Budget {
            max_rows: Some(10),
            ..Budget::default()
        };
        let err = budget.configure(&mut cfg).unwrap_err().to_string();
        assert!(err.contains("need --spill-dir"), "{err}");
        let budget = Budget {
            max_bytes: Some(1 << 20),
            spill_dir: Some("/tmp/x".into()),
            ..Budget::default()
        };
        budget.configure(&mut cfg).unwrap();
        let policy = cfg.dynamic.unwrap();
        assert!(policy.spill && policy.max_bytes == Some(1 << 20));
    }
}
