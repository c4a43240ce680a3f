//! Click examples: a label and, per id field, a bag of ids (usually one id; several for a
//! multi-valued field such as genres), and the TSV files they are read from.
//!
//! Storage is columnar and flat: one label byte per row, and for row `r`, field `f` the bag
//! `keys[starts[r·F + f] .. starts[r·F + f + 1]]`. The ids are stored already mapped to roam
//! keys by [`feature_key`], so training never hashes. `starts` is `u32`: a set of more than
//! 2^32 − 1 ids is refused when it is built.
//!
//! File format (what `scripts/fetch-data.sh ml-100k-ctr` writes, and what `--data DIR` reads
//! from `DIR/train.tsv` and `DIR/test.tsv`): a header `label<TAB>name1<TAB>name2…`, then one
//! line per example: the label (`0` or `1`), then one cell per field, a cell being its ids
//! (unsigned decimal integers) separated by `,` (an empty cell is an empty bag). Both files
//! must name the same fields in the same order.

use std::path::Path;

use anyhow::{Context, bail, ensure};
use roam::Key;

/// The top bit of a key: set for the model's dense parameters and the job's reserved keys,
/// clear for every feature key, so the two never collide.
pub const RESERVED_BIT: Key = 1 << 63;

/// SplitMix64's finaliser: a fixed, well-mixed bijection of `u64`.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The roam key of id `id` of field `field`: the pair hashed into the 63-bit feature half of
/// the sparse key space (the same id in two fields gets two unrelated keys). Distinct pairs
/// collide with probability about 2^-63 each: for 10^9 distinct features, about 5·10^-2 that
/// any two share a row, the usual hashing-trick trade (the two would share an embedding).
pub fn feature_key(field: usize, id: u64) -> Key {
    mix(id ^ mix(field as u64 + 1).rotate_left(17)) & !RESERVED_BIT
}

/// Examples of one split.
#[derive(Clone, Debug, Default)]
pub struct Examples {
    /// Fields per row.
    pub fields: usize,
    /// One label per row, 0 or 1.
    pub labels: Vec<u8>,
    /// Bag boundaries: `fields · rows + 1` entries, the first 0.
    pub starts: Vec<u32>,
    /// Every bag's keys, row after row, field after field.
    pub keys: Vec<Key>,
}

impl Examples {
    /// An empty split of `fields` fields.
    pub fn new(fields: usize) -> Self {
        Self {
            fields,
            labels: Vec::new(),
            starts: vec![0],
            keys: Vec::new(),
        }
    }

    /// Rows.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The keys of row `row`'s bag of field `field`.
    pub fn bag(&self, row: usize, field: usize) -> &[Key] {
        let i = row * self.fields + field;
        &self.keys[self.starts[i] as usize..self.starts[i + 1] as usize]
    }

    /// Closes the current bag (its keys were pushed onto `keys`); fails past 2^32 − 1 keys.
    pub fn end_bag(&mut self) -> anyhow::Result<()> {
        let end = u32::try_from(self.keys.len())
            .ok()
            .filter(|&e| e < u32::MAX)
            .context("more than 2^32 - 2 ids in one split")?;
        self.starts.push(end);
        Ok(())
    }

    /// Rows of two fields, each row its two bags, all labelled 0 (tests).
    #[cfg(test)]
    pub(crate) fn two_fields(rows: &[[&[Key]; 2]]) -> Self {
        let mut e = Self::new(2);
        for row in rows {
            for bag in row {
                e.keys.extend_from_slice(bag);
                e.end_bag().expect("few keys");
            }
            e.labels.push(0);
        }
        e
    }

    /// Fraction of rows labelled 1.
    pub fn click_rate(&self) -> f64 {
        if self.is_empty() {
            return 0.0;
        }
        self.labels.iter().map(|&l| f64::from(l)).sum::<f64>() / self.len() as f64
    }
}

/// A training and a test split over the same fields.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// The fields' names.
    pub field_names: Vec<String>,
    /// Training examples.
    pub train: Examples,
    /// Test examples.
    pub test: Examples,
    /// Synthetic data only: the test AUC of the hidden model that drew the labels (the best
    /// a model can expect).
    pub oracle_test_auc: Option<f64>,
}

/// Reads `dir/train.tsv` and `dir/test.tsv`.
pub fn load_dir(dir: &Path) -> anyhow::Result<Dataset> {
    ensure!(dir.is_dir(), "--data {}: not a directory", dir.display());
    let (names, train) = load_file(&dir.join("train.tsv"))?;
    let (test_names, test) = load_file(&dir.join("test.tsv"))?;
    ensure!(
        names == test_names,
        "{}: the test file's fields {test_names:?} differ from the training file's {names:?}",
        dir.display()
    );
    Ok(Dataset {
        field_names: names,
        train,
        test,
        oracle_test_auc: None,
    })
}

/// Reads one split file: its field names and examples.
pub fn load_file(path: &Path) -> anyhow::Result<(Vec<String>, Examples)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("{}", path.display()))
}

/// Parses the text of one split file.
pub fn parse(text: &str) -> anyhow::Result<(Vec<String>, Examples)> {
    let mut lines = text.lines().enumerate();
    let Some((_, header)) = lines.next() else {
        bail!("empty file: expected a header `label<TAB>field…`");
    };
    let mut cols = header.split('\t');
    ensure!(
        cols.next() == Some("label"),
        "line 1: the header must start with `label`, then one name per field"
    );
    let names: Vec<String> = cols.map(str::to_string).collect();
    ensure!(!names.is_empty(), "line 1: the header names no field");
    ensure!(
        names.len() <= 1024,
        "line 1: {} fields; at most 1024 are supported",
        names.len()
    );
    let mut out = Examples::new(names.len());
    for (i, line) in lines {
        if line.is_empty() {
            continue;
        }
        let n = i + 1;
        let mut cells = line.split('\t');
        let label = match cells.next() {
            Some("0") => 0,
            Some("1") => 1,
            other => bail!("line {n}: the label must be 0 or 1, got {other:?}"),
        };
        let mut fields = 0;
        for (field, cell) in cells.enumerate() {
            ensure!(
                field < names.len(),
                "line {n}: more than the header's {} fields",
                names.len()
            );
            for id in cell.split(',').filter(|s| !s.is_empty()) {
                let id: u64 = id
                    .parse()
                    .with_context(|| format!("line {n}, field {}: bad id {id:?}", names[field]))?;
                out.keys.push(feature_key(field, id));
            }
            out.end_bag()?;
            fields += 1;
        }
        ensure!(
            fields == names.len(),
            "line {n}: {fields} fields, the header names {}",
            names.len()
        );
        out.labels.push(label);
    }
    Ok((names, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bags_and_names_bad_lines() {
        let (names, ex) = parse("label\ta\tb\n1\t3\t4,5\n0\t7\t\n").unwrap();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(ex.len(), 2);
        assert_eq!(ex.labels, [1, 0]);
        assert_eq!(ex.bag(0, 0), [feature_key(0, 3)]);
        assert_eq!(ex.bag(0, 1), [feature_key(1, 4), feature_key(1, 5)]);
        assert!(ex.bag(1, 1).is_empty());
        assert_ne!(feature_key(0, 3), feature_key(1, 3));
        assert_eq!(feature_key(5, u64::MAX) & RESERVED_BIT, 0);
        for (text, needle) in [
            ("", "empty file"),
            ("user\titem\n", "must start with `label`"),
            ("label\ta\n2\t1\n", "line 2: the label must be 0 or 1"),
            ("label\ta\n1\tx\n", "line 2, field a: bad id"),
            ("label\ta\n1\t1\t2\n", "line 2: more than"),
            ("label\ta\tb\n1\t1\n", "line 2: 1 fields"),
        ] {
            let err = format!("{:#}", parse(text).unwrap_err());
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }
}
