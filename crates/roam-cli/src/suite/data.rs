//! Where the suite's workloads on real data find it: the data directory that
//! `scripts/fetch-data.sh` fills (`$ROAM_DATA_DIR`, else the repository's `data/`), the files
//! each workload needs, and the choice of workloads when some data is missing (a default left
//! out with a line saying why; a workload asked for with `--apps` fails with the files and the
//! fetch command). Synthetic workloads need nothing here.

use std::path::{Path, PathBuf};

use super::plan::{App, Preset};

impl App {
    /// The files the workload reads under the data directory ([`data_dir`]), each with the
    /// `scripts/fetch-data.sh` dataset that writes it; none for the synthetic workloads.
    pub(crate) fn data_files(self) -> Vec<(PathBuf, &'static str)> {
        match self {
            Self::W2vGcide => {
                let mut files = vec![(PathBuf::from(GCIDE_CORPUS), "gcide")];
                files.extend(
                    roam_apps::w2v::similarity::EVAL_FILES
                        .iter()
                        .map(|name| (Path::new(GENSIM_EVAL).join(name), "gensim-eval")),
                );
                files
            }
            Self::CtrMl100k => ["train.tsv", "test.tsv"]
                .iter()
                .map(|name| (Path::new(CTR_ML100K).join(name), "ml-100k-ctr"))
                .collect(),
            Self::Mf | Self::MfZipf | Self::Kge | Self::KgeBuckets | Self::W2v | Self::Ctr => {
                Vec::new()
            }
        }
    }

    /// Why the workload cannot run with the data under `data`: the missing files and the
    /// `scripts/fetch-data.sh` command that fetches them; `None` when everything is there.
    pub(crate) fn missing_data(self, data: &Path) -> Option<String> {
        let mut missing = Vec::new();
        let mut datasets: Vec<&str> = Vec::new();
        for (file, dataset) in self.data_files() {
            let path = data.join(file);
            if !path.is_file() {
                missing.push(path.display().to_string());
                if !datasets.contains(&dataset) {
                    datasets.push(dataset);
                }
            }
        }
        (!missing.is_empty()).then(|| {
            format!(
                "{} {} missing (fetch {} with `scripts/fetch-data.sh {}`)",
                missing.join(", "),
                if missing.len() == 1 { "is" } else { "are" },
                if missing.len() == 1 { "it" } else { "them" },
                datasets.join(" ")
            )
        })
    }
}

/// The GCIDE corpus, under the data directory (`scripts/fetch-data.sh gcide`).
pub(crate) const GCIDE_CORPUS: &str = "gcide/corpus.txt";

/// MovieLens-100k as clicks, `train.tsv` and `test.tsv`, under the data directory
/// (`scripts/fetch-data.sh ml-100k-ctr`).
pub(crate) const CTR_ML100K: &str = "ml-100k-ctr";

/// gensim's WordSim-353, SimLex-999 and analogy files, under the data directory
/// (`scripts/fetch-data.sh gensim-eval`).
pub(crate) const GENSIM_EVAL: &str = "gensim-eval";

/// Where `scripts/fetch-data.sh` puts the real datasets: `$ROAM_DATA_DIR` when it is set (the
/// script writes there too), else `data/` of the repository this binary was built from.
pub(crate) fn data_dir() -> PathBuf {
    match std::env::var_os("ROAM_DATA_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
            // crates/roam-cli -> the repository root.
            manifest.ancestors().nth(2).unwrap_or(manifest).join("data")
        }
    }
}

/// The workloads of a suite and the lines saying which defaults were left out: `asked` (the
/// `--apps` list) when given, an error naming the missing files and the fetch command if one
/// of them lacks its data under `data`; else `preset`'s default workloads, without those whose
/// data is missing (one line each saying why).
pub(crate) fn choose_apps(
    preset: Preset,
    asked: Option<&[App]>,
    data: &Path,
) -> anyhow::Result<(Vec<App>, Vec<String>)> {
    if let Some(asked) = asked {
        for &app in asked {
            if let Some(why) = app.missing_data(data) {
                anyhow::bail!("--apps {}: {why}", app.name());
            }
        }
        return Ok((asked.to_vec(), Vec::new()));
    }
    let mut apps = Vec::new();
    let mut skipped = Vec::new();
    for app in preset.apps() {
        match app.missing_data(data) {
            None => apps.push(app),
            Some(why) => skipped.push(format!(
                "workload {} (not asked for with --apps): {why}",
                app.name()
            )),
        }
    }
    Ok((apps, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        fn touch(&self, file: &str) {
            let path = self.0.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn gcide_word_vectors_are_a_default_of_full_only_when_the_data_is_there() {
        let data = Scratch::new("roam-suite-plan-data");
        let synthetic = [
            App::Mf,
            App::MfZipf,
            App::Kge,
            App::KgeBuckets,
            App::W2v,
            App::Ctr,
        ];
        assert!(!Preset::Tiny.apps().contains(&App::W2vGcide));
        assert_eq!(Preset::Quick.apps(), synthetic);
        for preset in [Preset::Full] {
            assert!(preset.apps().contains(&App::W2vGcide), "{preset:?}");
            // Nothing fetched: left out of the defaults, one line saying why.
            let (apps, skipped) = choose_apps(preset, None, &data.0).unwrap();
            assert_eq!(apps, synthetic, "{preset:?}");
            assert_eq!(skipped.len(), 2, "{skipped:?}");
            for part in [
                "w2v-gcide",
                "gcide/corpus.txt",
                "gensim-eval/wordsim353.tsv",
                "`scripts/fetch-data.sh gcide gensim-eval`",
            ] {
                assert!(skipped[0].contains(part), "{part}: {}", skipped[0]);
            }
            for part in [
                "ctr-ml100k",
                "ml-100k-ctr/train.tsv",
                "ml-100k-ctr/test.tsv",
                "`scripts/fetch-data.sh ml-100k-ctr`",
            ] {
                assert!(skipped[1].contains(part), "{part}: {}", skipped[1]);
            }
        }
        // Asked for: an error naming the files and the fetch command.
        let err = choose_apps(Preset::Quick, Some(&[App::Mf, App::W2vGcide]), &data.0)
            .unwrap_err()
            .to_string();
        for part in [
            "--apps w2v-gcide",
            "gcide/corpus.txt",
            "`scripts/fetch-data.sh gcide gensim-eval`",
        ] {
            assert!(err.contains(part), "{part}: {err}");
        }
        // The other workloads need nothing.
        let (apps, skipped) = choose_apps(Preset::Quick, Some(&synthetic), &data.0).unwrap();
        assert_eq!((apps, skipped.len()), (synthetic.to_vec(), 0));
        assert_eq!(
            choose_apps(Preset::Tiny, None, &data.0).unwrap(),
            (Preset::Tiny.apps(), Vec::new())
        );

        // Only the corpus: the benchmarks are named, and only their fetch.
        data.touch("gcide/corpus.txt");
        let why = App::W2vGcide.missing_data(&data.0).unwrap();
        assert!(!why.contains("corpus.txt"), "{why}");
        assert!(
            why.contains("questions-words.txt")
                && why.ends_with(
                    " are missing (fetch them with `scripts/fetch-data.sh gensim-eval`)"
                ),
            "{why}"
        );
        data.touch("gensim-eval/wordsim353.tsv");
        data.touch("gensim-eval/simlex999.txt");
        let why = App::W2vGcide.missing_data(&data.0).unwrap();
        assert!(
            why.ends_with(
                "gensim-eval/questions-words.txt is missing (fetch it with \
                 `scripts/fetch-data.sh gensim-eval`)"
            ) && !why.contains("wordsim353"),
            "{why}"
        );
        data.touch("gensim-eval/questions-words.txt");
        data.touch("ml-100k-ctr/train.tsv");
        data.touch("ml-100k-ctr/test.tsv");
        assert_eq!(App::CtrMl100k.missing_data(&data.0), None);

        // Everything there: a default of full, never of quick or tiny.
        assert_eq!(App::W2vGcide.missing_data(&data.0), None);
        for preset in [Preset::Full, Preset::Quick] {
            let (apps, skipped) = choose_apps(preset, None, &data.0).unwrap();
            assert_eq!((apps, skipped.len()), (preset.apps(), 0), "{preset:?}");
        }
        for preset in [Preset::Quick, Preset::Tiny] {
            let (apps, _) = choose_apps(preset, None, &data.0).unwrap();
            assert!(!apps.contains(&App::W2vGcide), "{preset:?}");
        }
        let asked = [App::W2vGcide];
        assert_eq!(
            choose_apps(Preset::Tiny, Some(&asked), &data.0).unwrap().0,
            asked
        );
    }
}
