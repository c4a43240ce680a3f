//! The suite's results file (`results.json`): one record per child run with its configuration,
//! outcome, wall and CPU time and everything rank 0 reported, plus the per-run figures the
//! summaries are built from (mean epoch seconds and CPU seconds, bytes per data point, the NuPS
//! modes' replica figures, the sampling scheme and the workload's quality metric). Written
//! again after every run, so an interrupted suite leaves valid partial results.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::plan::{App, Mode, Preset, Profile};

/// How a child run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Status {
    /// Exited 0 and rank 0 printed its report.
    Ok,
    /// Exited non-zero, was killed by a signal, or printed no report.
    Failed,
    /// Hit the time limit and was stopped.
    Timeout,
}

/// The cluster counters of rank 0's report (summed over nodes by the job itself).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Counters {
    /// Fraction of key accesses served from the local store.
    pub(crate) local_fraction: f64,
    /// Frames sent by all nodes.
    pub(crate) messages_sent: u64,
    /// Bytes sent by all nodes.
    pub(crate) bytes_sent: u64,
    /// Keys relocated.
    pub(crate) relocations: u64,
    /// CPU seconds of all node processes over the counted span.
    #[serde(default)]
    pub(crate) cpu_seconds: f64,
}

/// One child run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    /// Unique within the suite; also the log file's stem.
    pub(crate) id: String,
    /// The workload.
    pub(crate) app: App,
    /// The mode.
    pub(crate) mode: Mode,
    /// The network profile.
    pub(crate) profile: Profile,
    /// Nodes.
    pub(crate) nodes: u32,
    /// Worker threads per node.
    pub(crate) workers_per_node: u32,
    /// Repetition, from 1.
    pub(crate) rep: u32,
    /// The negative-sampling scheme the job used (its report's `settings.sampling`; until it
    /// reports, or if it never does, the scheme it was going to use), for the workloads that
    /// sample; `None` for the others and in results files written before the suite recorded it.
    #[serde(default)]
    pub(crate) sampling: Option<String>,
    /// The scheme the suite passed with `--sampling`; `None` when it passed none (the mode's
    /// default: `--samplings default`).
    #[serde(default)]
    pub(crate) sampling_requested: Option<String>,
    /// The child's command line.
    pub(crate) command: Vec<String>,
    /// How it ended.
    pub(crate) status: Status,
    /// Exit code, if it exited.
    pub(crate) exit_code: Option<i32>,
    /// Terminating signal, if it was killed.
    pub(crate) signal: Option<i32>,
    /// The time limit, seconds.
    pub(crate) timeout_seconds: f64,
    /// Wall time of the whole child run (start-up, data generation, training, evaluation).
    pub(crate) wall_seconds: f64,
    /// CPU seconds (user + system) of the launcher and every node process, whole run.
    pub(crate) cpu_seconds: f64,
    /// What went wrong, if anything (the last lines of the log).
    pub(crate) error: Option<String>,
    /// The run's stderr log, relative to the results directory.
    pub(crate) log: String,
    /// The dataset rank 0 reported.
    pub(crate) dataset: Option<String>,
    /// Rank 0's per-epoch figures (`epoch`, `seconds`, `cpu_seconds`, `loss`, quality...).
    pub(crate) epochs: Vec<Value>,
    /// The summed node counters.
    pub(crate) counters: Option<Counters>,
    /// Data points in one epoch (ratings, triples, words).
    pub(crate) points_per_epoch: Option<u64>,
    /// The job's settings.
    pub(crate) settings: Option<Value>,
    /// The replica figures of the report (NuPS modes): every entry of its `settings` (or, failing
    /// that, of the report itself) whose name starts with `replica` (`replicated_keys`,
    /// `replica_bytes_per_round`, staleness percentiles, ...), copied as they were; empty for
    /// runs that replicate nothing and in results files written before the suite recorded them.
    #[serde(default)]
    pub(crate) replica: BTreeMap<String, Value>,
}

/// Whether a report entry is a replica figure: its name starts with `replica` (which covers
/// `replicated`), in any case.
pub(crate) fn is_replica_name(name: &str) -> bool {
    name.get(..7)
        .is_some_and(|head| head.eq_ignore_ascii_case("replica"))
}

/// The replica figures of rank 0's report: the `replica*` entries of its `settings`, plus
/// those at the report's top level that the settings do not have (the apps decide where they
/// put them and what they call them; nothing here depends on the exact names).
pub(crate) fn replica_figures(report: &Value) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let entries = |v: Option<&Value>| {
        v.and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(k, _)| is_replica_name(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    for (k, v) in entries(report.get("settings")) {
        out.insert(k, v);
    }
    for (k, v) in entries(Some(report)) {
        out.entry(k).or_insert(v);
    }
    out
}

impl RunRecord {
    /// Mean of a per-epoch figure over the run's epochs (`None` if absent or not finite).
    pub(crate) fn epoch_mean(&self, field: &str) -> Option<f64> {
        let values: Vec<f64> = self
            .epochs
            .iter()
            .filter_map(|e| e.get(field).and_then(Value::as_f64))
            .collect();
        (!values.is_empty() && values.len() == self.epochs.len())
            .then(|| values.iter().sum::<f64>() / values.len() as f64)
            .filter(|m| m.is_finite())
    }

    /// Mean wall seconds per epoch.
    pub(crate) fn epoch_seconds(&self) -> Option<f64> {
        self.epoch_mean("seconds")
    }

    /// Mean CPU seconds per epoch, summed over all node processes.
    pub(crate) fn epoch_cpu_seconds(&self) -> Option<f64> {
        self.epoch_mean("cpu_seconds")
    }

    /// The workload's quality metric after the last epoch, with its name: kge's (and
    /// kge-buckets') filtered test MRR (`mrr`), w2v's headline metric (the report's `settings.metric`: `topic_auc` on the
    /// synthetic corpus), w2v-gcide's WordSim-353 Spearman correlation (`wordsim_spearman`),
    /// ctr's test AUC (`test_auc`, higher is better); `None` for the others and when the job did not report it.
    pub(crate) fn quality(&self) -> Option<(String, f64)> {
        let name = match self.app {
            App::Kge | App::KgeBuckets => "mrr".to_string(),
            App::W2vGcide => "wordsim_spearman".to_string(),
            App::Ctr | App::CtrMl100k => "test_auc".to_string(),
            App::W2v => self
                .settings
                .as_ref()
                .and_then(|s| s.get("metric"))
                .and_then(Value::as_str)
                .unwrap_or("topic_auc")
                .to_string(),
            App::Mf | App::MfZipf => return None,
        };
        let value = self
            .epochs
            .iter()
            .rev()
            .find_map(|e| e.get(&name).and_then(Value::as_f64))
            .filter(|x| x.is_finite())?;
        Some((name, value))
    }

    /// Mean over epochs of the fraction of `local` samples that found no local key (the epochs'
    /// `sampling.fallback_fraction`).
    pub(crate) fn fallback_fraction(&self) -> Option<f64> {
        let values: Vec<f64> = self
            .epochs
            .iter()
            .filter_map(|e| {
                e.pointer("/sampling/fallback_fraction")
                    .and_then(Value::as_f64)
            })
            .collect();
        (!values.is_empty() && values.len() == self.epochs.len())
            .then(|| values.iter().sum::<f64>() / values.len() as f64)
            .filter(|m| m.is_finite())
    }

    /// Bytes sent by all nodes per data point trained (whole job's traffic over all epochs'
    /// points: initialisation and the final evaluation's traffic included).
    pub(crate) fn bytes_per_point(&self) -> Option<f64> {
        let counters = self.counters.as_ref()?;
        let points = self.points_per_epoch? * self.epochs.len() as u64;
        (points > 0).then(|| counters.bytes_sent as f64 / points as f64)
    }

    /// The numeric replica figures, by name: numbers as they are, those inside objects under
    /// their dotted path (`replication.node0.bytes_per_round`); strings, booleans, nulls and
    /// arrays are left out (they stay in the record).
    pub(crate) fn replica_numbers(&self) -> BTreeMap<String, f64> {
        fn walk(name: String, v: &Value, depth: usize, out: &mut BTreeMap<String, f64>) {
            match v {
                Value::Object(inner) if depth < 4 => {
                    for (k, v) in inner {
                        walk(format!("{name}.{k}"), v, depth + 1, out);
                    }
                }
                _ => {
                    if let Some(x) = v.as_f64() {
                        out.insert(name, x);
                    }
                }
            }
        }
        let mut out = BTreeMap::new();
        for (k, v) in &self.replica {
            walk(k.clone(), v, 0, &mut out);
        }
        out
    }

    /// Whether the run produced figures.
    pub(crate) fn ok(&self) -> bool {
        self.status == Status::Ok
    }
}

/// The whole results file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Results {
    /// `roam` version that ran the suite.
    pub(crate) roam_version: String,
    /// Start time, UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub(crate) started_utc: String,
    /// The suite's own command line.
    pub(crate) command: Vec<String>,
    /// Sizes preset.
    pub(crate) preset: Preset,
    /// Online CPUs of the machine.
    pub(crate) cpus: usize,
    /// Configurations left out, with reasons.
    pub(crate) skipped: Vec<String>,
    /// One record per run, in execution order.
    pub(crate) runs: Vec<RunRecord>,
}

impl Results {
    /// Writes the file atomically (temporary file, then rename).
    pub(crate) fn write(&self, path: &Path) -> anyhow::Result<()> {
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(self).context("serialising the results")?;
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
    }

    /// Reads a results file.
    pub(crate) fn read(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` and the directory-name form `YYYYMMDD-HHMMSS` of a Unix time.
pub(crate) fn utc_stamps(unix_seconds: u64) -> (String, String) {
    let days = (unix_seconds / 86_400) as i64;
    let secs = unix_seconds % 86_400;
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (secs / 3600, secs / 60 % 60, secs % 60);
    (
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z"),
        format!("{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}"),
    )
}

/// Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A record of a successful mf run in lapse at 2 nodes on loopback that reported nothing,
/// with `fields` (an object) set over it: a fixture for the suite's tests.
#[cfg(test)]
pub(crate) fn test_record(fields: Value) -> RunRecord {
    let mut record = serde_json::json!({
        "id": "x", "app": "mf", "mode": "lapse", "profile": "loopback", "nodes": 2,
        "workers_per_node": 1, "rep": 1, "command": [], "status": "ok", "exit_code": 0,
        "signal": null, "timeout_seconds": 1.0, "wall_seconds": 1.0, "cpu_seconds": 1.0,
        "error": null, "log": "x.log", "dataset": null, "epochs": [], "counters": null,
        "points_per_epoch": null, "settings": null,
    });
    for (name, value) in fields.as_object().expect("fields as an object") {
        record[name] = value.clone();
    }
    serde_json::from_value(record).expect("a valid record")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps_of_known_instants() {
        assert_eq!(utc_stamps(0).0, "1970-01-01T00:00:00Z");
        assert_eq!(
            utc_stamps(951_782_400 + 3661),
            (
                "2000-02-29T01:01:01Z".to_string(),
                "20000229-010101".to_string()
            )
        );
        assert_eq!(utc_stamps(1_798_761_599).0, "2026-12-31T23:59:59Z");
    }

    #[test]
    fn per_run_figures_need_every_epoch() {
        let mut r = test_record(serde_json::json!({
            "profile": "10gbe",
            "epochs": [{"seconds": 1.0, "cpu_seconds": 2.0}, {"seconds": 3.0, "cpu_seconds": 4.0}],
            "counters": {"local_fraction": 0.5, "messages_sent": 1, "bytes_sent": 400,
                         "relocations": 0},
            "points_per_epoch": 100,
        }));
        assert_eq!(r.epoch_seconds(), Some(2.0));
        assert_eq!(r.epoch_cpu_seconds(), Some(3.0));
        assert_eq!(r.bytes_per_point(), Some(2.0));
        r.epochs[1] = serde_json::json!({"seconds": 3.0});
        assert_eq!(r.epoch_cpu_seconds(), None);
        assert!(
            r.replica.is_empty(),
            "older records have no replica figures"
        );
    }

    #[test]
    fn replica_figures_are_every_replica_entry_whatever_its_name() {
        let report = serde_json::json!({
            "app": "mf", "replica_rounds": 7, "replicated_keys": 1,
            "settings": {
                "dim": 8, "replicated_keys": 120, "Replica_Bytes_Per_Round": 5e3,
                "replica_staleness": {"p50_us": 80.0, "p99_us": 900.5, "unit": "us",
                                      "node0": {"rounds": 3}},
                "replicas": "all nodes", "not_replica": 1,
            },
        });
        let figures = replica_figures(&report);
        let names: Vec<&str> = figures.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "Replica_Bytes_Per_Round",
                "replica_rounds",
                "replica_staleness",
                "replicas",
                "replicated_keys"
            ]
        );
        assert_eq!(
            figures["replicated_keys"], 120,
            "settings win over the top level"
        );
        assert!(replica_figures(&serde_json::json!({"settings": null})).is_empty());

        let mut r = test_record(serde_json::json!({"mode": "nups"}));
        r.replica = figures;
        let numbers = r.replica_numbers();
        assert_eq!(numbers["replicated_keys"], 120.0);
        assert_eq!(numbers["replica_staleness.p99_us"], 900.5);
        assert_eq!(numbers["replica_staleness.node0.rounds"], 3.0);
        assert!(!numbers.contains_key("replicas"));
        assert!(!numbers.contains_key("replica_staleness.unit"));
        let back: RunRecord = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.replica, r.replica);
    }
}
