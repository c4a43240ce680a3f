//! Knowledge-graph data: triples of dense integer ids and the loader of `--data DIR`.
//!
//! A [`Graph`] holds the train, valid and test triples with entity ids in
//! `0..num_entities` and relation ids in `0..num_relations` (every id of every triple is in
//! range; the loaders and the generator guarantee it). A directory holds `train`, `valid` and
//! `test` files with one common extension:
//! - `.del`: `head relation tail` as 0-based integer ids (lapse-toy, LibKGE); the entity and
//!   relation counts are the largest id seen in any of the three files plus one;
//! - `.txt` / `.tsv`: the same with names (pykeen's datasets); ids are given in order of first
//!   appearance over train, valid, test, so every name in any file has an id.
//!
//! Fields are tab-separated (`.del` also accepts other white space). Blank lines are skipped;
//! any other malformed line is an error naming the file and line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};

/// Largest accepted id plus one: keys are `u64`, but embeddings for more entities than this
/// would not fit in memory anyway, and the limit turns a corrupt id into a clear error.
pub const MAX_IDS: u64 = 1 << 31;

/// One fact `(subject, relation, object)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Triple {
    /// Subject (head) entity.
    pub s: u32,
    /// Relation.
    pub r: u32,
    /// Object (tail) entity.
    pub o: u32,
}

impl Triple {
    /// A triple from its three ids.
    pub fn new(s: u32, r: u32, o: u32) -> Self {
        Self { s, r, o }
    }
}

/// A knowledge graph split into train, valid and test triples.
#[derive(Clone, Debug)]
pub struct Graph {
    /// Entities: ids `0..num_entities`.
    pub num_entities: u32,
    /// Relations: ids `0..num_relations`.
    pub num_relations: u32,
    /// Training triples.
    pub train: Vec<Triple>,
    /// Validation triples.
    pub valid: Vec<Triple>,
    /// Test triples.
    pub test: Vec<Triple>,
    /// Where the graph came from (directory or synthetic spec), for reports.
    pub name: String,
}

impl Graph {
    /// Checks the invariants every consumer relies on (ids in range, something to train on).
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(!self.train.is_empty(), "{}: no training triples", self.name);
        ensure!(!self.test.is_empty(), "{}: no test triples", self.name);
        for (split, triples) in [
            ("train", &self.train),
            ("valid", &self.valid),
            ("test", &self.test),
        ] {
            if let Some(t) = triples.iter().find(|t| {
                t.s >= self.num_entities || t.o >= self.num_entities || t.r >= self.num_relations
            }) {
                bail!(
                    "{}: {split} triple {t:?} is out of range ({} entities, {} relations)",
                    self.name,
                    self.num_entities,
                    self.num_relations
                );
            }
        }
        Ok(())
    }

    /// All triples of the three splits (for the ranking filter).
    pub fn all(&self) -> impl Iterator<Item = &Triple> {
        self.train.iter().chain(&self.valid).chain(&self.test)
    }
}

/// File formats of a data directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Ids,
    Names,
}

/// Loads `dir/{train,valid,test}.{del|txt|tsv}` (the first extension for which `train` exists).
pub fn load_dir(dir: &Path) -> anyhow::Result<Graph> {
    ensure!(dir.is_dir(), "--data {}: not a directory", dir.display());
    let Some((ext, format)) = [
        ("del", Format::Ids),
        ("txt", Format::Names),
        ("tsv", Format::Names),
    ]
    .into_iter()
    .find(|(ext, _)| dir.join(format!("train.{ext}")).is_file()) else {
        bail!(
            "--data {}: no train.del, train.txt or train.tsv in the directory",
            dir.display()
        );
    };
    let paths: Vec<PathBuf> = ["train", "valid", "test"]
        .iter()
        .map(|s| dir.join(format!("{s}.{ext}")))
        .collect();
    for p in &paths {
        ensure!(
            p.is_file(),
            "--data {}: {} is missing (train.{ext} is there)",
            dir.display(),
            p.display()
        );
    }
    let texts = paths
        .iter()
        .map(|p| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let sources: Vec<(String, &str)> = paths
        .iter()
        .zip(&texts)
        .map(|(p, t)| (p.display().to_string(), t.as_str()))
        .collect();
    let mut graph = match format {
        Format::Ids => parse_ids(&sources)?,
        Format::Names => parse_names(&sources)?,
    };
    graph.name = dir.display().to_string();
    graph.validate()?;
    Ok(graph)
}

/// Parses `[(file name, text); 3]` (train, valid, test) of integer-id triples.
pub fn parse_ids(sources: &[(String, &str)]) -> anyhow::Result<Graph> {
    ensure!(sources.len() == 3, "expected train, valid and test");
    let mut splits = Vec::with_capacity(3);
    let (mut ne, mut nr) = (0u64, 0u64);
    for (file, text) in sources {
        let mut triples = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            ensure!(
                fields.len() == 3,
                "{file}:{}: expected 3 tab-separated integer ids `head relation tail`, found {} field(s): {line:?}",
                n + 1,
                fields.len()
            );
            let mut ids = [0u32; 3];
            for (i, (field, what)) in fields.iter().zip(["head", "relation", "tail"]).enumerate() {
                let id: u64 = field.parse().map_err(|_| {
                    anyhow::anyhow!(
                        "{file}:{}: {what} {field:?} is not a non-negative integer id",
                        n + 1
                    )
                })?;
                ensure!(
                    id < MAX_IDS,
                    "{file}:{}: {what} id {id} is too large (limit {MAX_IDS})",
                    n + 1
                );
                ids[i] = id as u32;
            }
            ne = ne.max(u64::from(ids[0]) + 1).max(u64::from(ids[2]) + 1);
            nr = nr.max(u64::from(ids[1]) + 1);
            triples.push(Triple::new(ids[0], ids[1], ids[2]));
        }
        splits.push(triples);
    }
    let test = splits.pop().unwrap_or_default();
    let valid = splits.pop().unwrap_or_default();
    let train = splits.pop().unwrap_or_default();
    Ok(Graph {
        num_entities: ne as u32,
        num_relations: nr as u32,
        train,
        valid,
        test,
        name: String::new(),
    })
}

/// Parses `[(file name, text); 3]` (train, valid, test) of name triples.
pub fn parse_names(sources: &[(String, &str)]) -> anyhow::Result<Graph> {
    ensure!(sources.len() == 3, "expected train, valid and test");
    let mut entities: HashMap<String, u32> = HashMap::new();
    let mut relations: HashMap<String, u32> = HashMap::new();
    fn id_of(map: &mut HashMap<String, u32>, name: &str) -> u32 {
        if let Some(&id) = map.get(name) {
            return id;
        }
        let id = map.len() as u32;
        map.insert(name.to_string(), id);
        id
    }
    let mut splits = Vec::with_capacity(3);
    for (file, text) in sources {
        let mut triples = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_end_matches(['\r', '\n']);
            if line.trim().is_empty() {
                continue;
            }
            let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
            ensure!(
                fields.len() == 3,
                "{file}:{}: expected 3 tab-separated names `head<TAB>relation<TAB>tail`, found {} field(s): {line:?}",
                n + 1,
                fields.len()
            );
            if let Some(i) = fields.iter().position(|f| f.is_empty()) {
                bail!(
                    "{file}:{}: empty {} name: {line:?}",
                    n + 1,
                    ["head", "relation", "tail"][i]
                );
            }
            let s = id_of(&mut entities, fields[0]);
            let r = id_of(&mut relations, fields[1]);
            let o = id_of(&mut entities, fields[2]);
            ensure!(
                (entities.len() as u64) < MAX_IDS && (relations.len() as u64) < MAX_IDS,
                "{file}:{}: too many distinct names",
                n + 1
            );
            triples.push(Triple::new(s, r, o));
        }
        splits.push(triples);
    }
    let test = splits.pop().unwrap_or_default();
    let valid = splits.pop().unwrap_or_default();
    let train = splits.pop().unwrap_or_default();
    Ok(Graph {
        num_entities: entities.len() as u32,
        num_relations: relations.len() as u32,
        train,
        valid,
        test,
        name: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src<'a>(train: &'a str, valid: &'a str, test: &'a str) -> Vec<(String, &'a str)> {
        vec![
            ("train".into(), train),
            ("valid".into(), valid),
            ("test".into(), test),
        ]
    }

    #[test]
    fn ids_count_entities_and_relations_over_all_files() {
        let g = parse_ids(&src("0\t1\t2\n\n3\t0\t1\n", "4\t2\t0\n", "1\t1\t5\r\n")).unwrap();
        assert_eq!((g.num_entities, g.num_relations), (6, 3));
        assert_eq!(g.train, vec![Triple::new(0, 1, 2), Triple::new(3, 0, 1)]);
        assert_eq!(g.test, vec![Triple::new(1, 1, 5)]);
    }

    #[test]
    fn names_get_ids_in_order_of_first_appearance() {
        let g = parse_names(&src("a\tlikes\tb\nb\tlikes\tc d\n", "", "c d\thates\ta\n")).unwrap();
        assert_eq!((g.num_entities, g.num_relations), (3, 2));
        assert_eq!(g.train, vec![Triple::new(0, 0, 1), Triple::new(1, 0, 2)]);
        assert_eq!(g.test, vec![Triple::new(2, 1, 0)]);
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let err = parse_ids(&src("0\t1\t2\n0\t1\n", "", ""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("train:2") && err.contains("2 field"), "{err}");
        let err = parse_ids(&src("0\t1\t2\n", "0\tx\t2\n", ""))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("valid:1") && err.contains("relation \"x\""),
            "{err}"
        );
        let err = parse_ids(&src("0\t-1\t2\n", "", ""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("train:1"), "{err}");
        let err = parse_ids(&src("0\t1\t99999999999\n", "", ""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("too large"), "{err}");
        let err = parse_names(&src("a\tb\n", "", "")).unwrap_err().to_string();
        assert!(err.contains("train:1"), "{err}");
        let err = parse_names(&src("a\tb\tc\n", "", "a\t\tc\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("test:1") && err.contains("empty relation"),
            "{err}"
        );
    }

    #[test]
    fn a_graph_without_test_triples_is_refused() {
        let mut g = parse_ids(&src("0\t0\t1\n", "", "")).unwrap();
        g.name = "x".into();
        assert!(
            g.validate()
                .unwrap_err()
                .to_string()
                .contains("no test triples")
        );
    }
}
