//! `roam launch --max-restarts K`: when a node dies, the whole job is stopped and started again
//! from the latest complete checkpoint, up to K times.
//!
//! This module owns the decision between attempts: whether the job may be restarted, from which
//! checkpoint, and the node command of the next attempt. The attempts themselves are ordinary
//! launches (`super::run_attempt`: namespaces, cgroups, children and supervision are made anew
//! for each and torn down after it).
//!
//! Invariants:
//! - A restart happens only after a node *failed* (non-zero exit or a signal the launcher did
//!   not send) and every child of that attempt has been reaped; a SIGINT/SIGTERM to the launcher
//!   ends the job, never restarts it, also when it arrives between attempts.
//! - The checkpoint directory is the node command's own `--checkpoint-dir D` (or
//!   `--checkpoint-dir=D`); a checkpoint is complete iff `D/manifest.json` reads as a manifest
//!   (it is written last, atomically). The next attempt gets `--resume D` (replacing any
//!   `--resume` of the command); without a complete checkpoint it runs the command as given,
//!   which starts the training over, and says so.
//! - Machine-checkable output: every restart prints one line
//!   `[launch] restart I of at most K: <node> <why>; <from where>`, and a job run with
//!   `--max-restarts` ends with `[launch] restarts: N` (N restarts made), whatever its outcome.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitStatus;

use anyhow::ensure;
use parking_lot::Mutex;

use super::{LaunchArgs, describe, notice};

/// The restart options of `roam launch`.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct RestartArgs {
    /// When a node dies (non-zero exit or a signal), stop the other nodes and start the whole
    /// job again, up to this many times: from the latest complete checkpoint in the node
    /// command's `--checkpoint-dir D` (the nodes get `--resume D`), else from scratch. Each
    /// restart prints `[launch] restart I of at most K: ...`, and the job ends with
    /// `[launch] restarts: N`.
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub max_restarts: u32,
}

impl RestartArgs {
    /// Refuses what cannot be restarted, before anything is created.
    pub(super) fn check(&self, args: &LaunchArgs) -> anyhow::Result<()> {
        ensure!(
            self.max_restarts == 0
                || (args.membership.join_at.is_empty() && args.membership.drain_at.is_empty()),
            "--max-restarts cannot be combined with --join-at or --drain-at: a restarted job \
             starts with its --nodes nodes again"
        );
        Ok(())
    }
}

/// How one attempt of the job ended.
#[derive(Clone, Debug)]
pub(super) struct Attempt {
    /// The exit code the launcher would exit with after this attempt alone.
    pub code: i32,
    /// The node that failed first (its name and status), if one did.
    pub failed: Option<(String, ExitStatus)>,
    /// Whether the launcher was interrupted (SIGINT/SIGTERM) during the attempt.
    pub interrupted: bool,
}

/// Runs attempts of the job through `attempt` (given the node command of each) until one ends
/// without a node failure, the launcher is interrupted, or `max_restarts` restarts were made;
/// returns the exit code of the last attempt. `interrupted` says whether a SIGINT/SIGTERM
/// arrived since the job started.
pub(super) fn run<E: Write>(
    args: &LaunchArgs,
    err: &Mutex<E>,
    interrupted: &dyn Fn() -> bool,
    attempt: &mut dyn FnMut(&[OsString]) -> anyhow::Result<Attempt>,
) -> anyhow::Result<i32> {
    let max = args.restarts.max_restarts;
    let dir = checkpoint_dir(&args.program);
    let mut program = args.program.clone();
    let mut restarts = 0;
    let code = loop {
        let outcome = attempt(&program)?;
        let Some((node, status)) = outcome.failed.filter(|_| !outcome.interrupted) else {
            break outcome.code;
        };
        let why = format!("{node} {}", describe(status));
        if restarts == max {
            notice(
                err,
                &format!("{why}; no restarts left ({max} made), giving up"),
            );
            break outcome.code;
        }
        if interrupted() {
            break outcome.code;
        }
        restarts += 1;
        let from = match &dir {
            None => "the node command has no --checkpoint-dir, so the job starts over from \
                     scratch (nothing of the previous attempt is kept)"
                .to_owned(),
            Some(d) => match crate::checkpoint::manifest_of(d) {
                Ok(m) => {
                    program = with_resume(&args.program, d.as_os_str());
                    format!(
                        "resuming from checkpoint {} (id {}, taken after epoch {})",
                        d.display(),
                        m.id,
                        m.epoch
                    )
                }
                Err(e) => {
                    program = args.program.clone();
                    format!("no complete checkpoint ({e}), so the job starts over from scratch")
                }
            },
        };
        notice(
            err,
            &format!("restart {restarts} of at most {max}: {why}; {from}"),
        );
    };
    notice(err, &format!("restarts: {restarts}"));
    Ok(code)
}

/// The value of the command's `--checkpoint-dir` (the last one, as clap takes it), if any.
fn checkpoint_dir(program: &[OsString]) -> Option<PathBuf> {
    let mut found = None;
    let mut it = program.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == "--checkpoint-dir" {
            found = it.next().map(PathBuf::from);
        } else if let Some(v) = a.to_str().and_then(|s| s.strip_prefix("--checkpoint-dir=")) {
            found = Some(PathBuf::from(v));
        }
    }
    found
}

/// `program` with every `--resume` removed and `--resume dir` appended.
fn with_resume(program: &[OsString], dir: &OsStr) -> Vec<OsString> {
    let mut out = Vec::with_capacity(program.len() + 2);
    let mut it = program.iter();
    while let Some(a) = it.next() {
        if a == "--resume" {
            it.next();
        } else if !a.to_str().is_some_and(|s| s.starts_with("--resume=")) {
            out.push(a.clone());
        }
    }
    out.push("--resume".into());
    out.push(dir.to_owned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_checkpoint_dir_is_read_from_the_node_command() {
        let cmd = os(&[
            "roam",
            "train",
            "mf",
            "--checkpoint-dir",
            "/d",
            "--epochs",
            "3",
        ]);
        assert_eq!(checkpoint_dir(&cmd), Some(PathBuf::from("/d")));
        let cmd = os(&["roam", "train", "mf", "--checkpoint-dir=/e"]);
        assert_eq!(checkpoint_dir(&cmd), Some(PathBuf::from("/e")));
        assert_eq!(checkpoint_dir(&os(&["sh", "-c", "x"])), None);
        // The program's own name is not an option.
        assert_eq!(checkpoint_dir(&os(&["--checkpoint-dir", "x"])), None);
    }

    fn args(program: &[&str], max: u32) -> LaunchArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            launch: LaunchArgs,
        }
        let mut argv = vec!["roam", "--nodes", "2", "--max-restarts"];
        let max = max.to_string();
        argv.push(&max);
        argv.push("--");
        argv.extend_from_slice(program);
        Cli::try_parse_from(argv).unwrap().launch
    }

    fn killed(node: &str) -> Attempt {
        use std::os::unix::process::ExitStatusExt;
        Attempt {
            code: 137,
            failed: Some((node.to_owned(), ExitStatus::from_raw(libc::SIGKILL))),
            interrupted: false,
        }
    }

    /// Runs [`run`] over scripted attempt outcomes; returns the code, the node commands of
    /// the attempts and the notices.
    fn scripted(
        args: &LaunchArgs,
        mut outcomes: Vec<Attempt>,
        before: &dyn Fn(usize),
    ) -> (i32, Vec<Vec<OsString>>, String) {
        let err = Mutex::new(Vec::new());
        let mut commands = Vec::new();
        outcomes.reverse();
        let code = run(args, &err, &|| false, &mut |program| {
            before(commands.len());
            commands.push(program.to_vec());
            Ok(outcomes.pop().expect("no more attempts scripted"))
        })
        .unwrap();
        (code, commands, String::from_utf8(err.into_inner()).unwrap())
    }

    #[test]
    fn a_failed_attempt_restarts_from_the_checkpoint_once_complete() {
        let dir = std::env::temp_dir().join(format!("roam-restart-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_str().unwrap();
        let args = args(&["roam", "train", "--checkpoint-dir", d], 2);
        let ok = Attempt {
            code: 0,
            failed: None,
            interrupted: false,
        };
        // The first attempt dies before any checkpoint, the second after one.
        let manifest = serde_json::json!({
            "format": "roam-checkpoint", "version": 1, "id": 3, "epoch": 2,
            "created_unix_ms": 0, "num_nodes": 2,
            "key_space": {"num_keys": 4, "sparse": false, "value_len": 1,
                          "lengths_crc32": null, "hidden_per_value": 0, "hidden_per_key": 0},
            "shards": [], "app": null
        });
        let write = |attempt: usize| {
            if attempt == 1 {
                std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
            }
        };
        let (code, commands, log) =
            scripted(&args, vec![killed("node 1"), killed("node 0"), ok], &write);
        assert_eq!(code, 0, "{log}");
        assert_eq!(
            commands[0], commands[1],
            "no checkpoint yet: the command as given"
        );
        assert_eq!(
            commands[2],
            os(&["roam", "train", "--checkpoint-dir", d, "--resume", d])
        );
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), 3, "{log}");
        assert!(
            lines[0].starts_with(
                "[launch] restart 1 of at most 2: node 1 was killed by signal 9; no complete \
                 checkpoint ("
            ) && lines[0].ends_with("so the job starts over from scratch"),
            "{log}"
        );
        assert_eq!(
            lines[1],
            format!(
                "[launch] restart 2 of at most 2: node 0 was killed by signal 9; resuming from \
                 checkpoint {d} (id 3, taken after epoch 2)"
            )
        );
        assert_eq!(lines[2], "[launch] restarts: 2");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn restarts_stop_at_the_limit_and_never_follow_an_interruption() {
        let args = args(&["sh", "-c", "exit 1"], 1);
        let (code, commands, log) =
            scripted(&args, vec![killed("node 0"), killed("node 1")], &|_| {});
        assert_eq!((code, commands.len()), (137, 2), "{log}");
        assert!(log.contains("no --checkpoint-dir"), "{log}");
        assert!(
            log.contains("node 1 was killed by signal 9; no restarts left (1 made), giving up"),
            "{log}"
        );
        assert!(log.ends_with("[launch] restarts: 1\n"), "{log}");

        let mut interrupted = killed("node 0");
        interrupted.interrupted = true;
        interrupted.code = 130;
        let (code, commands, log) = scripted(&args, vec![interrupted], &|_| {});
        assert_eq!((code, commands.len()), (130, 1), "{log}");
        assert_eq!(log, "[launch] restarts: 0\n");
    }

    #[test]
    fn resume_replaces_any_resume_of_the_command() {
        let cmd = os(&[
            "roam",
            "train",
            "--resume",
            "/old",
            "--resume=/x",
            "--epochs",
            "3",
        ]);
        assert_eq!(
            with_resume(&cmd, OsStr::new("/d")),
            os(&["roam", "train", "--epochs", "3", "--resume", "/d"])
        );
    }
}
