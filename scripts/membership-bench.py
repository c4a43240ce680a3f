#!/usr/bin/env python3
"""Elastic membership benchmark (docs/elasticity.md, "Adding and removing servers").

Runs MF `classic` on 4 nodes x 1 worker at BANDWIDTH (default 1 Gbit/s) per node link with
50 us latency, three ways, RUNS times each: no change (`base`), two servers joining at JOIN s
(`join`), and one server joining at JOIN s that is drained at DRAIN s (`jd`). Each run's output
is kept with wall-clock stamps (`OUT/<config><i>.log`); the report gives rank 0's seconds per
epoch before and after each change (medians and ranges over the runs: the epochs that ended
before the join was asked, the epochs that started after it was done, and for `jd` those after
the drain; `base` is split at JOIN s the same way), the epochs a join or drain fell in against
the epoch before, and the final test RMSE of every run.

Usage: scripts/membership-bench.py [--runs 3] [--join 5] [--drain 11] [--bandwidth 1gbit]
       [--epochs 12] [--out DIR] [--analyse-only]
       (run from the repository root after `cargo build --release`)
"""

import argparse
import json
import pathlib
import re
import statistics as st
import subprocess
import time

import roam_report  # scripts/roam_report.py: reports from old and new binaries

R = "target/release/roam"
DATA = "rows=20000,cols=10000,rank=10,nnz=1e6,noise=0.1,test=0.1,seed=1"


def run(out: pathlib.Path, tag: str, extra: list[str], bandwidth: str, epochs: int) -> None:
    train = [R, "train", "mf", "--mode", "classic", "--epochs", str(epochs), "--synthetic", DATA]
    cmd = [R, "launch", "--nodes", "4", "--workers-per-node", "1", "--bandwidth", bandwidth,
           "--latency-us", "50", *extra, "--", *roam_report.with_json(train)]
    t0 = time.time()
    with open(out / f"{tag}.log", "w") as log:
        log.write(" ".join(cmd) + "\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            log.write(f"{time.time() - t0:9.3f} {line}")
        log.write(f"RC {proc.wait()}\n")


def load(path: pathlib.Path) -> dict:
    r = {"events": [], "rc": None}
    for line in open(path):
        if '"epochs"' in line:
            stamp = float(line.split()[0])
            report = json.loads(line.split("] ", 1)[1])
            epochs = report["epochs"]
            ends, starts, at = [], [], stamp
            for e in reversed(epochs):
                ends.append(at)
                at -= e["seconds"] + e.get("eval_seconds", 0)
                starts.append(at)
            r["ends"] = list(reversed(ends))
            r["starts"] = list(reversed(starts))
            r["secs"] = [e["seconds"] for e in epochs]
            r["rmse"] = epochs[-1]["test_rmse"]
        # Every time is this script's stamp of the line (the launcher's own clock, in its
        # messages, runs a few hundred ms behind the stamps; the epochs are placed by stamps).
        m = re.search(r"started at ([\d.]+) s", line)
        if "[launch] joiner" in line and m:
            stamp = float(line.split()[0])
            r["events"].append(("join", stamp, stamp))
        m = re.search(r"\[joiner (\d+)\] roam: joined the running job", line)
        if m:
            # Admitted: the join is done at this line's stamp.
            joins = [i for i, e in enumerate(r["events"]) if e[0] == "join"]
            k = int(m.group(1)) - 1
            if k < len(joins):
                kind, asked, _ = r["events"][joins[k]]
                r["events"][joins[k]] = (kind, asked, float(line.split()[0]))
        m = re.search(r"node (\d+) drained at ([\d.]+) s \(asked at ([\d.]+) s", line)
        if m:
            done = float(line.split()[0])
            took = float(m.group(2)) - float(m.group(3))
            r["events"].append(("drain", done - took, done))
        if line.startswith("RC"):
            r["rc"] = int(line.split()[1])
    return r


def fmt(xs: list[float]) -> str:
    return f"{st.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def epoch_at(r: dict, t: float) -> int:
    return next((i for i, end in enumerate(r["ends"]) if t <= end), len(r["ends"]) - 1)


def between(r: dict, start: float, end: float) -> list[float]:
    """Seconds of the epochs that started (the previous epoch's end, its evaluation
    included) at or after `start` and ended by `end`."""
    return [secs for secs, begin, stop in zip(r["secs"], r["starts"], r["ends"])
            if begin >= start and stop <= end]


def medians(rs: list[dict], start: list[float], end: list[float]) -> str:
    parts = [between(r, a, b) for r, a, b in zip(rs, start, end)]
    if any(not p for p in parts):
        return "no whole epoch in that span"
    return fmt([st.median(p) for p in parts]) + f", {min(map(len, parts))}+ epochs per run"


def analyse(out: pathlib.Path, runs: int, join: float) -> None:
    inf = float("inf")
    for config in ("base", "join", "jd"):
        rs = [load(out / f"{config}{i}.log") for i in range(1, runs + 1)]
        print(f"{config}: exit codes {[r['rc'] for r in rs]}, final test RMSE "
              f"{[r.get('rmse') for r in rs]}")
        # (asked, done) of the first join and of the drain, per run.
        joins = [next(((a, d) for k, a, d in r["events"] if k == "join"), (join, join))
                 for r in rs]
        drains = [next(((a, d) for k, a, d in r["events"] if k == "drain"), (inf, inf))
                  for r in rs]
        print(f"  s/epoch before the join: {medians(rs, [0.0] * runs, [a for a, _ in joins])}")
        if config == "jd":
            print(f"  after the join, before the drain: "
                  f"{medians(rs, [d for _, d in joins], [a for a, _ in drains])}")
            print(f"  after the drain: {medians(rs, [d for _, d in drains], [inf] * runs)}")
        else:
            # Two joiners: after the later one was admitted.
            last = [max((d for k, _, d in r["events"] if k == "join"), default=join) for r in rs]
            print(f"  s/epoch after the join{'s' if config == 'join' else ''}: "
                  f"{medians(rs, last, [inf] * runs)}")
        for r in rs:
            for kind, asked, done in r["events"]:
                i, j = epoch_at(r, asked), epoch_at(r, done)
                slowest = max(r["secs"][i:j + 1])
                before = f"{r['secs'][i - 1]:.2f} s before it" if i > 0 else "no epoch before"
                print(f"  {kind} asked at {asked:.2f} s, done at {done:.2f} s: slowest epoch "
                      f"{slowest:.2f} s against {before}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--join", type=float, default=5.0)
    ap.add_argument("--drain", type=float, default=11.0)
    ap.add_argument("--bandwidth", default="1gbit", help="per node link, tc syntax")
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--out", default="bench-results/membership")
    ap.add_argument("--analyse-only", action="store_true")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.analyse_only:
        configs = {
            "base": [],
            "join": ["--join-at", f"{args.join},{args.join}"],
            "jd": ["--join-at", f"{args.join}", "--drain-at", f"4@{args.drain}"],
        }
        for i in range(1, args.runs + 1):
            for config, extra in configs.items():
                run(out, f"{config}{i}", extra, args.bandwidth, args.epochs)
    analyse(out, args.runs, args.join)


if __name__ == "__main__":
    main()
