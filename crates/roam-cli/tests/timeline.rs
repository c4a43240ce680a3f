//! `roam bench timeline`: draws a PNG of the expected size from synthetic timeline files of
//! `scripts/balancer-bench.py --timeline` (all four configurations, balancer decisions, a slow
//! window), one panel per file; a malformed, a missing or an empty file fails with its name in
//! the error, without a panic.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("roam-timeline-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating the scratch directory");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A run of `epochs` epochs of `seconds(i)` each, with `decisions` as (at_s, kind).
fn run(epochs: usize, seconds: impl Fn(usize) -> f64, decisions: &[(f64, &str)]) -> String {
    let mut end = 0.5;
    let epochs: Vec<String> = (0..epochs)
        .map(|i| {
            end += seconds(i);
            format!(r#"{{"end_s": {end}, "seconds": {}}}"#, seconds(i))
        })
        .collect();
    let decisions: Vec<String> = decisions
        .iter()
        .map(|(at, kind)| format!(r#"{{"at_s": {at}, "kind": "{kind}", "node": 2, "buckets": 3}}"#))
        .collect();
    format!(
        r#"{{"steady_s_per_epoch": 1.0, "moves": {}, "epochs": [{}], "decisions": [{}]}}"#,
        decisions.len(),
        epochs.join(", "),
        decisions.join(", ")
    )
}

/// A timeline file as the script writes it: two repetitions per configuration.
fn timeline(slow: &str) -> String {
    let none = run(8, |_| 1.0, &[]);
    let off = run(8, |i| if (2..6).contains(&i) { 2.5 } else { 1.1 }, &[]);
    let on = run(
        8,
        |i| if (2..4).contains(&i) { 2.0 } else { 1.2 },
        &[
            (3.2, "Shrink"),
            (4.0, "Keep"),
            (7.5, "Probe"),
            (8.5, "Undo"),
        ],
    );
    let none_off = run(8, |_| 0.95, &[]);
    format!(
        r#"{{"job": ["mf", "--mode", "classic", "--synthetic", "rows=2000,cols=1000,rank=10,nnz=1e5,test=0.1,seed=1", "--epochs", "8"],
 "slow": "{slow}", "scope": "service", "nodes": 4, "profile": "10gbe",
 "runs": {{"none": [{none}, {none}], "off": [{off}, {off}], "on": [{on}, {on}], "none-off": [{none_off}]}}}}"#
    )
}

/// Runs `roam bench timeline ARGS...`.
fn roam<A: AsRef<OsStr>>(args: &[A]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roam"))
        .args(["bench", "timeline"])
        .args(args)
        .output()
        .expect("running roam bench timeline")
}

/// Checks the PNG signature and the IHDR chunk; returns (width, height).
fn png_size(path: &Path) -> (u32, u32) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert!(data.len() > 33, "{}: too short for a PNG", path.display());
    assert_eq!(&data[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&data[12..16], b"IHDR", "IHDR is the first chunk");
    let be = |at: usize| u32::from_be_bytes(data[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

#[test]
fn draws_one_panel_per_file() {
    let dir = Scratch::new("draw");
    let (a, b) = (dir.0.join("window.json"), dir.0.join("whole.json"));
    std::fs::write(&a, timeline("2:4@3-8")).unwrap();
    std::fs::write(&b, timeline("2:40")).unwrap();
    let png = dir.0.join("out.png");
    let title = "synthetic timeline";
    let out = roam(&[
        a.as_os_str(),
        b.as_os_str(),
        "-o".as_ref(),
        png.as_os_str(),
        "--title".as_ref(),
        title.as_ref(),
    ]);
    assert!(
        out.status.success(),
        "roam bench timeline failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 1150 wide; a 40-pixel title, 400 per panel and a 64-pixel caption high.
    assert_eq!(png_size(&png), (1150, 40 + 2 * 400 + 64));
    // One file: one panel.
    let out = roam(&[a.as_os_str(), "-o".as_ref(), png.as_os_str()]);
    assert!(out.status.success());
    assert_eq!(png_size(&png), (1150, 40 + 400 + 64));
}

#[test]
fn bad_files_fail_with_their_name() {
    let dir = Scratch::new("bad");
    let good = dir.0.join("good.json");
    std::fs::write(&good, timeline("2:4")).unwrap();
    let malformed = dir.0.join("malformed-timeline.json");
    std::fs::write(
        &malformed,
        r#"{"job": ["mf"], "runs": {"on": [{"epochs": [{"end_s": 1"#,
    )
    .unwrap();
    let no_epochs = dir.0.join("no-epochs.json");
    std::fs::write(
        &no_epochs,
        r#"{"job": ["mf"], "runs": {"on": [{"epochs": []}]}}"#,
    )
    .unwrap();
    let missing = dir.0.join("missing.json");
    let png = dir.0.join("out.png");
    for bad in [&malformed, &no_epochs, &missing] {
        let out = roam(&[
            good.as_os_str(),
            bad.as_os_str(),
            "-o".as_ref(),
            png.as_os_str(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{}: should fail", bad.display());
        assert!(
            stderr.contains(bad.file_name().unwrap().to_str().unwrap()),
            "{}: the error names the file: {stderr}",
            bad.display()
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!png.exists(), "no figure from a bad input");
    }
}
