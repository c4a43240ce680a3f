//! Runs one configuration as a child `roam launch ... -- roam train ...` process: stdout and
//! stderr go to files in the results directory, the child is reaped with `wait4` so that its
//! CPU time (the launcher's plus every node's, which the launcher reaps) comes with it, a run
//! past its time limit gets SIGTERM (the launcher forwards it to the nodes and removes its
//! namespaces) and SIGKILL if it still lingers, and rank 0's JSON line is parsed into a
//! [`RunRecord`].

use std::ffi::OsString;
use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use super::plan::RunSpec;
use super::record::{self, Counters, RunRecord, Status};

/// How long a run may take to exit after SIGTERM before it gets SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(15);

/// The child's command line: `EXE launch --nodes N --workers-per-node T --profile P --
/// EXE train APP --mode M --epochs E --json ARGS... [--sampling S]` (`--json`: the report and
/// every node's counters on stdout, which the record is read from).
pub(crate) fn command_line(exe: &Path, spec: &RunSpec) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![exe.into()];
    for a in [
        "launch".to_string(),
        "--nodes".to_string(),
        spec.nodes.to_string(),
        "--workers-per-node".to_string(),
        spec.workers_per_node.to_string(),
        "--profile".to_string(),
        spec.profile.name().to_string(),
        "--".to_string(),
    ] {
        args.push(a.into());
    }
    args.push(exe.into());
    for a in [
        "train",
        spec.app.command(),
        "--mode",
        spec.mode.name(),
        "--epochs",
        &spec.epochs.to_string(),
        "--json",
    ] {
        args.push(a.into());
    }
    args.extend(spec.train_args.iter().map(OsString::from));
    if let Some(s) = spec.sampling.requested() {
        args.push("--sampling".into());
        args.push(s.to_string().into());
    }
    args
}

/// How the child ended, from `wait4`.
struct Ended {
    exit_code: Option<i32>,
    signal: Option<i32>,
    cpu_seconds: f64,
    timed_out: bool,
}

/// Runs `spec`, logging to `dir/logs/ID.{out,log}`; `Err` only if the child could not be
/// started or waited for (a failing or slow run is a record with its status).
pub(crate) fn run(exe: &Path, spec: &RunSpec, dir: &Path) -> anyhow::Result<RunRecord> {
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let id = spec.id();
    let out_path = logs.join(format!("{id}.out"));
    let log_path = logs.join(format!("{id}.log"));
    let argv = command_line(exe, spec);
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(
            File::create(&out_path).with_context(|| format!("creating {}", out_path.display()))?,
        )
        .stderr(
            File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?,
        );
    let started = Instant::now();
    let child = command
        .spawn()
        .with_context(|| format!("starting {}", argv[0].to_string_lossy()))?;
    let ended = wait(child.id() as libc::pid_t, spec.timeout)
        .with_context(|| format!("waiting for run {id}"))?;
    let wall_seconds = started.elapsed().as_secs_f64();

    let stdout = std::fs::read_to_string(&out_path)
        .with_context(|| format!("reading {}", out_path.display()))?;
    let report = rank0_report(&stdout);
    let status = if ended.timed_out {
        Status::Timeout
    } else if ended.exit_code == Some(0) && report.is_some() {
        Status::Ok
    } else {
        Status::Failed
    };
    let error = match status {
        Status::Ok => None,
        Status::Timeout => Some(format!(
            "stopped after the time limit of {:.0} s",
            spec.timeout.as_secs_f64()
        )),
        Status::Failed => Some(failure_message(&ended, report.is_some(), &log_path)),
    };
    let mut record = RunRecord {
        id: id.clone(),
        app: spec.app,
        mode: spec.mode,
        profile: spec.profile,
        nodes: spec.nodes,
        workers_per_node: spec.workers_per_node,
        rep: spec.rep,
        sampling: spec
            .sampling
            .resolve(spec.app, spec.mode)
            .map(|s| s.to_string()),
        sampling_requested: spec.sampling.requested().map(|s| s.to_string()),
        command: argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        status,
        exit_code: ended.exit_code,
        signal: ended.signal,
        timeout_seconds: spec.timeout.as_secs_f64(),
        wall_seconds,
        cpu_seconds: ended.cpu_seconds,
        error,
        log: format!("logs/{id}.log"),
        dataset: None,
        epochs: Vec::new(),
        counters: None,
        points_per_epoch: None,
        settings: None,
        replica: Default::default(),
    };
    if let Some(report) = report {
        fill_from_report(&mut record, report)
            .with_context(|| format!("run {id}: reading rank 0's report"))?;
    }
    Ok(record)
}

/// Reaps `pid`, stopping it once `timeout` has passed.
fn wait(pid: libc::pid_t, timeout: Duration) -> anyhow::Result<Ended> {
    let started = Instant::now();
    let mut terminated_at: Option<Instant> = None;
    let mut killed = false;
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `status` and `usage` are valid and writable; `pid` is our own child.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            return Ok(Ended {
                exit_code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
                signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
                cpu_seconds: tv(usage.ru_utime) + tv(usage.ru_stime),
                timed_out: terminated_at.is_some(),
            });
        }
        if r < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                bail!("wait4({pid}): {err}");
            }
        }
        match terminated_at {
            None if started.elapsed() >= timeout => {
                // SAFETY: signalling our own unreaped child (its pid cannot be reused yet).
                unsafe { libc::kill(pid, libc::SIGTERM) };
                terminated_at = Some(Instant::now());
            }
            Some(at) if !killed && at.elapsed() >= TERM_GRACE => {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                killed = true;
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Why a run failed, with the tail of its log.
fn failure_message(ended: &Ended, reported: bool, log: &Path) -> String {
    let how = match (ended.exit_code, ended.signal) {
        (Some(0), _) if !reported => "exited 0 without rank 0's JSON report".to_string(),
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "ended in an unknown way".to_string(),
    };
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(5).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    if tail.is_empty() {
        how
    } else {
        format!("{how}; log tail: {}", tail.join(" | "))
    }
}

/// Rank 0's report: the JSON object with `app` and `epochs` among the launcher's stdout lines
/// (which carry a `[node R] ` prefix when launched).
pub(crate) fn rank0_report(stdout: &str) -> Option<Value> {
    stdout.lines().rev().find_map(|line| {
        let line = line.trim();
        let body = match line.strip_prefix('[') {
            Some(rest) => rest.split_once("] ").map_or(line, |(_, body)| body),
            None => line,
        };
        let v: Value = serde_json::from_str(body).ok()?;
        (v.get("app").is_some() && v.get("epochs").is_some_and(Value::is_array)).then_some(v)
    })
}

/// Copies the report's epochs, counters, dataset, settings, epoch size, replica figures and
/// sampling scheme into `record`.
fn fill_from_report(record: &mut RunRecord, report: Value) -> anyhow::Result<()> {
    let app = report.get("app").and_then(Value::as_str).unwrap_or("");
    if app != record.app.command() {
        bail!(
            "the report is for app {app:?}, not {}",
            record.app.command()
        );
    }
    record.counters =
        Some(serde_json::from_value::<Counters>(report.clone()).context("the cluster counters")?);
    record.epochs = report
        .get("epochs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    record.dataset = report
        .get("dataset")
        .and_then(Value::as_str)
        .map(str::to_string);
    record.replica = record::replica_figures(&report);
    record.settings = report.get("settings").cloned();
    record.points_per_epoch = record
        .settings
        .as_ref()
        .and_then(|s| s.get(record.app.points_setting()))
        .and_then(Value::as_u64);
    // The scheme the job says it used (the settings', else the first epoch's).
    let reported = record
        .settings
        .as_ref()
        .and_then(|s| s.get("sampling"))
        .or_else(|| record.epochs.first()?.pointer("/sampling/scheme"))
        .and_then(Value::as_str);
    if let Some(scheme) = reported {
        record.sampling = Some(scheme.to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_rank0s_report_among_prefixed_lines() {
        let out = "[node 1] {\"roam_node_stats\":{}}\n\
                   [node 0] {\"app\":\"mf\",\"epochs\":[{\"seconds\":1}]}\n\
                   [node 0] {\"roam_node_stats\":{}}\n";
        let v = rank0_report(out).unwrap();
        assert_eq!(v["app"], "mf");
        assert!(rank0_report("{\"app\":\"mf\"}\nnot json\n").is_none());
        assert_eq!(
            rank0_report("{\"app\":\"kge\",\"epochs\":[]}").unwrap()["app"],
            "kge"
        );
    }

    #[test]
    fn the_report_fills_the_record_with_its_replica_figures() {
        let mut record = record::test_record(serde_json::json!({"mode": "nups"}));
        let report = rank0_report(
            "[node 0] {\"app\":\"mf\",\"epochs\":[{\"seconds\":1,\"cpu_seconds\":2}],\
             \"local_fraction\":0.9,\"messages_sent\":1,\"bytes_sent\":2,\"relocations\":3,\
             \"settings\":{\"train_points\":10,\"replicated_keys\":64,\
             \"replica_staleness_p99_us\":700.0}}",
        )
        .unwrap();
        fill_from_report(&mut record, report).unwrap();
        assert_eq!(record.points_per_epoch, Some(10));
        assert_eq!(record.replica.len(), 2, "{:?}", record.replica);
        assert_eq!(record.replica["replicated_keys"], 64);
        assert_eq!(record.replica["replica_staleness_p99_us"], 700.0);
    }

    #[test]
    fn a_named_scheme_is_passed_and_the_reported_one_recorded() {
        use crate::suite::plan::{App, Mode, Profile, Sampling};
        let mut spec = RunSpec {
            app: App::W2v,
            mode: Mode::Lapse,
            nodes: 2,
            workers_per_node: 1,
            profile: Profile::Loopback,
            rep: 1,
            sampling: Sampling::Default,
            epochs: 1,
            train_args: Vec::new(),
            timeout: Duration::from_secs(1),
        };
        let line = |spec: &RunSpec| {
            command_line(Path::new("roam"), spec)
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(!line(&spec).contains("--sampling"));
        spec.sampling = "pool:4".parse().unwrap();
        assert!(
            line(&spec).ends_with(" --sampling pool:4"),
            "{}",
            line(&spec)
        );
        let mut record = record::test_record(serde_json::json!({
            "app": "w2v", "sampling": "pool:4", "sampling_requested": "pool:4",
        }));
        let report = rank0_report(
            "{\"app\":\"w2v\",\"epochs\":[{\"seconds\":1,\"topic_auc\":0.6,\
             \"sampling\":{\"scheme\":\"pool:4\",\"samples\":8,\"fallback_fraction\":0.5}}],\
             \"local_fraction\":0.9,\"messages_sent\":1,\"bytes_sent\":2,\"relocations\":3,\
             \"settings\":{\"train_words\":10,\"metric\":\"topic_auc\",\"sampling\":\"pool:4:x\"}}",
        )
        .unwrap();
        fill_from_report(&mut record, report).unwrap();
        assert_eq!(
            record.sampling.as_deref(),
            Some("pool:4:x"),
            "the settings' name wins"
        );
        assert_eq!(record.quality(), Some(("topic_auc".to_string(), 0.6)));
        assert_eq!(record.fallback_fraction(), Some(0.5));
    }
}
