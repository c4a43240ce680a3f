//! Rating matrices of the `mf` workload and their loaders.
//!
//! A [`Ratings`] holds a sparse `rows × cols` matrix split into training and test entries,
//! with 0-based dense row and column indices (`row < rows`, `col < cols` always holds).
//! `--data DIR` reads `train` and `test` from DIR in one of two formats:
//! - MatrixMarket coordinate (`train.mmc`/`test.mmc`, or extension-less files that start with
//!   the `%%MatrixMarket` banner): `%` comments, a size line `M N L`, then `L` lines
//!   `i j value` with 1-based indices; both files must declare the same `M × N`;
//! - `user item rating` text (`train.tsv`/`test.tsv`, or `.txt`): whitespace-separated, extra
//!   columns (e.g. a timestamp) ignored, `#`/`%` comment lines and one header line allowed;
//!   ids are arbitrary tokens, remapped to dense indices in order of first appearance in
//!   `train`. A test entry whose user or item never occurs in `train` has no trained factor:
//!   it is dropped and counted in [`Ratings::test_dropped`].
//!
//! Every malformed line is an error naming the file, the line and the offending text.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};

/// One observed cell.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry {
    /// 0-based row (user).
    pub row: u32,
    /// 0-based column (item).
    pub col: u32,
    /// Observed value (rating).
    pub value: f32,
}

/// A sparse matrix with a train/test split.
#[derive(Clone, Debug)]
pub struct Ratings {
    /// Rows of the matrix.
    pub rows: u32,
    /// Columns of the matrix.
    pub cols: u32,
    /// Training entries.
    pub train: Vec<Entry>,
    /// Held-out entries.
    pub test: Vec<Entry>,
    /// Test entries dropped because their row or column never occurs in training (TSV only).
    pub test_dropped: usize,
}

/// Most rows plus columns accepted: keeps keys and per-row tables within `u32` indices.
const MAX_DIM: u64 = 1 << 31;

impl Ratings {
    /// Mean of the training values (0 when there are none).
    pub fn train_mean(&self) -> f64 {
        if self.train.is_empty() {
            return 0.0;
        }
        self.train.iter().map(|e| f64::from(e.value)).sum::<f64>() / self.train.len() as f64
    }

    /// RMSE on the test entries of always predicting `mean` (the trivial baseline).
    pub fn test_rmse_of_constant(&self, mean: f64) -> f64 {
        if self.test.is_empty() {
            return 0.0;
        }
        let sse: f64 = self
            .test
            .iter()
            .map(|e| (f64::from(e.value) - mean).powi(2))
            .sum();
        (sse / self.test.len() as f64).sqrt()
    }
}

/// The format of a data directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    MatrixMarket,
    Triples,
}

/// Reads `train` and `test` from `dir` (see the module docs for the accepted names).
pub fn load_dir(dir: &Path) -> anyhow::Result<Ratings> {
    ensure!(dir.is_dir(), "--data {}: not a directory", dir.display());
    let (train_path, format) = find(dir, "train")?;
    let (test_path, test_format) = find(dir, "test")?;
    ensure!(
        format == test_format,
        "{} and {} are in different formats (one MatrixMarket, one `user item rating`)",
        train_path.display(),
        test_path.display()
    );
    match format {
        Format::MatrixMarket => {
            let train = read_mmc(&train_path)?;
            let test = read_mmc(&test_path)?;
            ensure!(
                (train.rows, train.cols) == (test.rows, test.cols),
                "{} is {}x{} but {} is {}x{}: train and test must have the same shape",
                train_path.display(),
                train.rows,
                train.cols,
                test_path.display(),
                test.rows,
                test.cols
            );
            Ok(Ratings {
                rows: train.rows,
                cols: train.cols,
                train: train.entries,
                test: test.entries,
                test_dropped: 0,
            })
        }
        Format::Triples => {
            let mut users = HashMap::new();
            let mut items = HashMap::new();
            let train = read_triples(&train_path, &mut users, &mut items, true)?;
            let before = (users.len(), items.len());
            let test = read_triples(&test_path, &mut users, &mut items, false)?;
            debug_assert_eq!(before, (users.len(), items.len()));
            let seen = test.len();
            let test: Vec<Entry> = test
                .into_iter()
                .filter(|e| e.row != u32::MAX && e.col != u32::MAX)
                .collect();
            let dropped = seen - test.len();
            Ok(Ratings {
                rows: users.len() as u32,
                cols: items.len() as u32,
                train,
                test,
                test_dropped: dropped,
            })
        }
    }
}

/// Finds the file for `stem` in `dir` and its format.
fn find(dir: &Path, stem: &str) -> anyhow::Result<(PathBuf, Format)> {
    for (ext, format) in [
        ("mmc", Format::MatrixMarket),
        ("tsv", Format::Triples),
        ("txt", Format::Triples),
    ] {
        let path = dir.join(format!("{stem}.{ext}"));
        if path.is_file() {
            return Ok((path, format));
        }
    }
    let bare = dir.join(stem);
    if bare.is_file() {
        let mut first = String::new();
        BufReader::new(File::open(&bare).with_context(|| format!("opening {}", bare.display()))?)
            .read_line(&mut first)
            .with_context(|| format!("reading {}", bare.display()))?;
        let format = if first.starts_with("%%MatrixMarket") {
            Format::MatrixMarket
        } else {
            Format::Triples
        };
        return Ok((bare, format));
    }
    bail!(
        "{}: no {stem} file (looked for {stem}.mmc, {stem}.tsv, {stem}.txt and {stem})",
        dir.display()
    )
}

/// Calls `each(line_number, line)` for every line of `path`, with clear errors for unreadable
/// or non-UTF-8 input.
fn for_each_line(
    path: &Path,
    mut each: impl FnMut(usize, &str) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut reader = BufReader::new(file);
    let mut bytes = Vec::new();
    let mut number = 0;
    loop {
        bytes.clear();
        let n = reader
            .read_until(b'\n', &mut bytes)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            return Ok(());
        }
        number += 1;
        let Ok(line) = std::str::from_utf8(&bytes) else {
            bail!("{}:{number}: not valid UTF-8 text", path.display());
        };
        each(number, line.trim_end_matches(['\n', '\r']))?;
    }
}

/// A MatrixMarket coordinate file.
#[derive(Debug)]
pub struct MatrixMarket {
    /// Declared rows.
    pub rows: u32,
    /// Declared columns.
    pub cols: u32,
    /// Entries, 0-based.
    pub entries: Vec<Entry>,
}

/// Reads a MatrixMarket `coordinate real|integer general` file.
pub fn read_mmc(path: &Path) -> anyhow::Result<MatrixMarket> {
    let mut size: Option<(u32, u32, u64)> = None;
    let mut entries = Vec::new();
    let name = path.display();
    for_each_line(path, |n, line| {
        let trimmed = line.trim();
        if n == 1 && trimmed.starts_with("%%") {
            return check_banner(trimmed).with_context(|| format!("{name}:1: {trimmed:?}"));
        }
        if trimmed.is_empty() || trimmed.starts_with('%') {
            return Ok(());
        }
        let fields: Vec<&str> = trimmed.split_ascii_whitespace().collect();
        let Some((rows, cols, declared)) = size else {
            ensure!(
                fields.len() == 3,
                "{name}:{n}: expected the size line `rows cols entries`, got {trimmed:?}"
            );
            let parse = |s: &str, what: &str| -> anyhow::Result<u64> {
                s.parse::<u64>().with_context(|| {
                    format!("{name}:{n}: {what} {s:?} is not a non-negative integer")
                })
            };
            let (r, c, l) = (
                parse(fields[0], "rows")?,
                parse(fields[1], "columns")?,
                parse(fields[2], "entries")?,
            );
            ensure!(
                r >= 1 && c >= 1,
                "{name}:{n}: the matrix must have at least one row and column, got {r}x{c}"
            );
            ensure!(
                r + c <= MAX_DIM,
                "{name}:{n}: {r}x{c} is too large (rows + columns must be at most {MAX_DIM})"
            );
            size = Some((r as u32, c as u32, l));
            entries.reserve(l.min(1 << 24) as usize);
            return Ok(());
        };
        ensure!(
            fields.len() == 3,
            "{name}:{n}: expected `row col value` (pattern matrices are not supported), got {trimmed:?}"
        );
        ensure!(
            (entries.len() as u64) < declared,
            "{name}:{n}: more entries than the {declared} declared on the size line"
        );
        let index = |s: &str, max: u32, what: &str| -> anyhow::Result<u32> {
            let i = s
                .parse::<u64>()
                .with_context(|| format!("{name}:{n}: {what} {s:?} is not a positive integer"))?;
            ensure!(
                (1..=u64::from(max)).contains(&i),
                "{name}:{n}: {what} {i} is outside 1..={max} (indices are 1-based)"
            );
            Ok((i - 1) as u32)
        };
        let row = index(fields[0], rows, "row")?;
        let col = index(fields[1], cols, "column")?;
        let value = parse_value(fields[2]).with_context(|| format!("{name}:{n}"))?;
        entries.push(Entry { row, col, value });
        Ok(())
    })?;
    let Some((rows, cols, declared)) = size else {
        bail!("{name}: no size line `rows cols entries` (empty or comment-only file)");
    };
    ensure!(
        entries.len() as u64 == declared,
        "{name}: the size line declares {declared} entries but the file has {}",
        entries.len()
    );
    Ok(MatrixMarket {
        rows,
        cols,
        entries,
    })
}

/// Accepts only the banner of a general real or integer coordinate matrix.
fn check_banner(banner: &str) -> anyhow::Result<()> {
    let words: Vec<String> = banner
        .split_ascii_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    ensure!(
        words.first().map(String::as_str) == Some("%%matrixmarket"),
        "not a MatrixMarket banner"
    );
    ensure!(
        words.get(1).map(String::as_str) == Some("matrix")
            && words.get(2).map(String::as_str) == Some("coordinate"),
        "only `matrix coordinate` (sparse) files are supported"
    );
    ensure!(
        matches!(
            words.get(3).map(String::as_str),
            Some("real" | "integer" | "double")
        ),
        "only real or integer values are supported"
    );
    ensure!(
        words
            .get(4)
            .map(String::as_str)
            .is_none_or(|s| s == "general"),
        "only `general` matrices are supported (not symmetric or skew)"
    );
    Ok(())
}

fn parse_value(s: &str) -> anyhow::Result<f32> {
    let v: f32 = s
        .parse()
        .map_err(|_| anyhow::anyhow!("value {s:?} is not a number"))?;
    ensure!(v.is_finite(), "value {s:?} is not finite");
    Ok(v)
}

/// Reads `user item rating` lines. With `grow`, unseen ids get new indices; otherwise they
/// map to `u32::MAX` (the caller drops those entries).
fn read_triples(
    path: &Path,
    users: &mut HashMap<String, u32>,
    items: &mut HashMap<String, u32>,
    grow: bool,
) -> anyhow::Result<Vec<Entry>> {
    let name = path.display();
    let mut entries = Vec::new();
    let mut seen_data = false;
    for_each_line(path, |n, line| {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('%') {
            return Ok(());
        }
        let fields: Vec<&str> = trimmed.split_ascii_whitespace().collect();
        ensure!(
            fields.len() >= 3,
            "{name}:{n}: expected `user item rating`, got {trimmed:?}"
        );
        let first = !seen_data;
        seen_data = true;
        let value = match parse_value(fields[2]) {
            Ok(v) => v,
            // One header line (e.g. `user_id:token item_id:token rating:float`) may precede the data.
            Err(_) if first && fields[2].parse::<f64>().is_err() => return Ok(()),
            Err(err) => return Err(err.context(format!("{name}:{n}"))),
        };
        let index = |map: &mut HashMap<String, u32>, token: &str| -> anyhow::Result<u32> {
            if let Some(&i) = map.get(token) {
                return Ok(i);
            }
            if !grow {
                return Ok(u32::MAX);
            }
            ensure!(
                (map.len() as u64) < MAX_DIM / 2,
                "{name}:{n}: too many distinct ids"
            );
            let i = map.len() as u32;
            map.insert(token.to_string(), i);
            Ok(i)
        };
        let row = index(users, fields[0])?;
        let col = index(items, fields[1])?;
        entries.push(Entry { row, col, value });
        Ok(())
    })?;
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> tempdir::Dir {
        let dir = tempdir::Dir::new();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    /// A throw-away directory under the system temp dir, removed on drop.
    mod tempdir {
        use std::path::{Path, PathBuf};
        use std::sync::atomic::{AtomicU32, Ordering};

        pub(super) struct Dir(PathBuf);

        impl Dir {
            pub(super) fn new() -> Self {
                static NEXT: AtomicU32 = AtomicU32::new(0);
                let path = std::env::temp_dir().join(format!(
                    "roam-mf-data-test-{}-{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&path).unwrap();
                Self(path)
            }

            pub(super) fn path(&self) -> &Path {
                &self.0
            }
        }

        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    const BANNER: &str = "%%MatrixMarket matrix coordinate real general\n% a comment\n";

    #[test]
    fn reads_matrix_market_one_based() {
        let dir = dir_with(&[
            (
                "train.mmc",
                &format!("{BANNER}3 2 3\n1 1 1.5\n3 2 -2\n2 1 4e-1\n"),
            ),
            ("test.mmc", &format!("{BANNER}3 2 1\n3 1 7\n")),
        ]);
        let r = load_dir(dir.path()).unwrap();
        assert_eq!((r.rows, r.cols), (3, 2));
        assert_eq!(
            r.train[1],
            Entry {
                row: 2,
                col: 1,
                value: -2.0
            }
        );
        assert_eq!(
            r.test,
            vec![Entry {
                row: 2,
                col: 0,
                value: 7.0
            }]
        );
        assert_eq!(r.test_dropped, 0);
    }

    #[test]
    fn reads_the_lapse_toy_matrix() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/lapse-toy/mf");
        if !dir.is_dir() {
            eprintln!("skipping: {} not present", dir.display());
            return;
        }
        let r = load_dir(&dir).unwrap();
        assert_eq!((r.rows, r.cols, r.train.len(), r.test.len()), (6, 4, 10, 8));
    }

    fn mmc_error(body: &str) -> String {
        let dir = dir_with(&[
            ("train.mmc", body),
            ("test.mmc", &format!("{BANNER}3 2 0\n")),
        ]);
        format!("{:#}", load_dir(dir.path()).unwrap_err())
    }

    #[test]
    fn matrix_market_errors_name_file_and_line() {
        let e = mmc_error(&format!("{BANNER}3 2 2\n1 1 1\n4 1 2\n"));
        assert!(
            e.contains("train.mmc:5") && e.contains("row 4 is outside 1..=3"),
            "{e}"
        );
        let e = mmc_error(&format!("{BANNER}3 2 2\n1 1 1\n0 1 2\n"));
        assert!(e.contains("train.mmc:5") && e.contains("1-based"), "{e}");
        let e = mmc_error(&format!("{BANNER}3 2 2\n1 1 x\n1 2 2\n"));
        assert!(
            e.contains("train.mmc:4") && e.contains("not a number"),
            "{e}"
        );
        let e = mmc_error(&format!("{BANNER}3 2 3\n1 1 1\n"));
        assert!(e.contains("declares 3 entries but the file has 1"), "{e}");
        let e = mmc_error(&format!("{BANNER}3 2 1\n1 1 1\n2 2 2\n"));
        assert!(
            e.contains("train.mmc:5") && e.contains("more entries"),
            "{e}"
        );
        let e = mmc_error("%%MatrixMarket matrix array real general\n3 2\n");
        assert!(e.contains("coordinate"), "{e}");
        let e = mmc_error(&format!("{BANNER}3 2 1\n1 1 nan\n"));
        assert!(e.contains("not finite"), "{e}");
        let e = mmc_error("% only comments\n");
        assert!(e.contains("no size line"), "{e}");
        let e = mmc_error(&format!("{BANNER}3 two 1\n"));
        assert!(e.contains("columns \"two\""), "{e}");
    }

    #[test]
    fn shapes_must_match() {
        let dir = dir_with(&[
            ("train.mmc", &format!("{BANNER}3 2 0\n")),
            ("test.mmc", &format!("{BANNER}3 3 0\n")),
        ]);
        let e = format!("{:#}", load_dir(dir.path()).unwrap_err());
        assert!(e.contains("same shape"), "{e}");
    }

    #[test]
    fn reads_triples_with_remapping_and_drops_unseen_test_ids() {
        let dir = dir_with(&[
            (
                "train.tsv",
                "user_id:token\titem_id:token\trating:float\nu7\tm3\t4\t881250949\nu2\tm3\t3\nu7\tm9\t5\n",
            ),
            ("test.tsv", "u2\tm9\t1\nu5\tm3\t2\nu7\tm4\t3\n"),
        ]);
        let r = load_dir(dir.path()).unwrap();
        assert_eq!((r.rows, r.cols), (2, 2));
        assert_eq!(
            r.train[0],
            Entry {
                row: 0,
                col: 0,
                value: 4.0
            }
        );
        assert_eq!(
            r.train[2],
            Entry {
                row: 0,
                col: 1,
                value: 5.0
            }
        );
        assert_eq!(
            r.test,
            vec![Entry {
                row: 1,
                col: 1,
                value: 1.0
            }]
        );
        assert_eq!(r.test_dropped, 2);
        assert!((r.train_mean() - 4.0).abs() < 1e-12);
    }

    #[test]
    fn triple_errors_name_file_and_line() {
        let dir = dir_with(&[("train.tsv", "a\tb\t1\na\tb\n"), ("test.tsv", "")]);
        let e = format!("{:#}", load_dir(dir.path()).unwrap_err());
        assert!(
            e.contains("train.tsv:2") && e.contains("expected `user item rating`"),
            "{e}"
        );
        let dir = dir_with(&[("train.tsv", "a\tb\t1\na\tb\tfive\n"), ("test.tsv", "")]);
        let e = format!("{:#}", load_dir(dir.path()).unwrap_err());
        assert!(
            e.contains("train.tsv:2") && e.contains("not a number"),
            "{e}"
        );
        let dir = dir_with(&[("train.tsv", "a\tb\t1\n")]);
        std::fs::write(dir.path().join("test.tsv"), b"a b \xff\n").unwrap();
        let e = format!("{:#}", load_dir(dir.path()).unwrap_err());
        assert!(e.contains("test.tsv:1"), "{e}");
        let dir = dir_with(&[("train.tsv", "a\tb\t1\n")]);
        let e = format!("{:#}", load_dir(dir.path()).unwrap_err());
        assert!(e.contains("no test file"), "{e}");
    }

    #[test]
    fn bare_names_are_sniffed() {
        let dir = dir_with(&[
            ("train", &format!("{BANNER}2 2 1\n1 1 1\n")),
            ("test", &format!("{BANNER}2 2 0\n")),
        ]);
        assert_eq!(load_dir(dir.path()).unwrap().train.len(), 1);
    }
}
