#!/usr/bin/env python3
"""Elastic membership benchmark (docs/elasticity.md, "Adding and removing servers").

Runs MF `classic` on 4 nodes x 1 worker at 1 Gbit/s with 50 us latency, three ways, RUNS times
each: no change (`base`), two servers joining at JOIN s (`join`), and one server joining at
JOIN s that is drained at DRAIN s (`jd`). Each run's output is kept with wall-clock stamps
(`OUT/<config><i>.log`); the report gives rank 0's seconds per epoch before and after (medians
and ranges over the runs), the epochs a join or drain fell in against the epoch before, and
the final test RMSE of every run.

Usage: scripts/membership-bench.py [--runs 3] [--join 5] [--drain 11] [--out DIR]
       [--analyse-only]   (run from the repository root after `cargo build --release`)
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
TRAIN = [R, "train", "mf", "--mode", "classic", "--epochs", "12", "--synthetic",
         "rows=20000,cols=10000,rank=10,nnz=1e6,noise=0.1,test=0.1,seed=1"]


def run(out: pathlib.Path, tag: str, extra: list[str]) -> None:
    cmd = [R, "launch", "--nodes", "4", "--workers-per-node", "1", "--bandwidth", "1gbit",
           "--latency-us", "50", *extra, "--", *roam_report.with_json(TRAIN)]
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
            ends, at = [], stamp
            for e in reversed(epochs):
                ends.append(at)
                at -= e["seconds"] + e.get("eval_seconds", 0)
            r["ends"] = list(reversed(ends))
            r["secs"] = [e["seconds"] for e in epochs]
            r["rmse"] = epochs[-1]["test_rmse"]
        m = re.search(r"started at ([\d.]+) s", line)
        if "[launch] joiner" in line and m:
            r["events"].append(("join", float(m.group(1)), float(m.group(1))))
        m = re.search(r"node (\d+) drained at ([\d.]+) s \(asked at ([\d.]+) s", line)
        if m:
            r["events"].append(("drain", float(m.group(3)), float(m.group(2))))
        if line.startswith("RC"):
            r["rc"] = int(line.split()[1])
    return r


def fmt(xs: list[float]) -> str:
    return f"{st.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def epoch_at(r: dict, t: float) -> int:
    return next((i for i, end in enumerate(r["ends"]) if t <= end), len(r["ends"]) - 1)


def analyse(out: pathlib.Path, runs: int) -> None:
    for config in ("base", "join", "jd"):
        rs = [load(out / f"{config}{i}.log") for i in range(1, runs + 1)]
        print(f"{config}: exit codes {[r['rc'] for r in rs]}, final test RMSE "
              f"{[r.get('rmse') for r in rs]}")
        print(f"  s/epoch, epochs 1-3: {fmt([st.median(r['secs'][0:3]) for r in rs])}; "
              f"epochs 6-12: {fmt([st.median(r['secs'][5:12]) for r in rs])}")
        if config == "jd":
            print(f"  epochs 6-9: {fmt([st.median(r['secs'][5:9]) for r in rs])}; "
                  f"epochs 10-12: {fmt([st.median(r['secs'][9:12]) for r in rs])}")
        for r in rs:
            for kind, asked, done in r["events"]:
                i, j = epoch_at(r, asked), epoch_at(r, done)
                slowest = max(r["secs"][i:j + 1])
                print(f"  {kind} asked at {asked:.2f} s, done at {done:.2f} s: slowest epoch "
                      f"{slowest:.2f} s against {r['secs'][i - 1]:.2f} s before it")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--join", type=float, default=5.0)
    ap.add_argument("--drain", type=float, default=11.0)
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
                run(out, f"{config}{i}", extra)
    analyse(out, args.runs)


if __name__ == "__main__":
    main()
