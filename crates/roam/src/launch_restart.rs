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
