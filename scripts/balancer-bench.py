#!/usr/bin/env python3
"""The load balancer's benchmark (PSLD, issue #14): one training job, run under `roam launch`
in three (or four) configurations, interleaved repetition by repetition so that drift on a
shared VM hits them alike:

  none      no straggler, balancer on (on a healthy cluster it must cost nothing)
  off       one node slowed (--slow), balancer off
  on        the same node slowed, balancer on
  none-off  (with --with-none-off) no straggler, balancer off

For each run it takes rank 0's report and prints, per configuration, the median and range over
repetitions of: seconds per epoch over the steady epochs (epoch --skip + 1 onwards: the first
ones include detection and migration), seconds per epoch over all epochs, and the balancer's
moves and bytes. Then the ratios that decide the targets: off/on (the balancer's gain) and
on/none (what is left of the straggler's cost).

With --timeline FILE.json it also records every epoch's end time and length of every run (the
figure of docs/elasticity.md is drawn from it by scripts/balancer-figure.py).

Usage: scripts/balancer-bench.py [--roam target/release/roam] [--reps 3] [--nodes 4]
         [--profile 10gbe] [--slow 2:40] [--scope service] [--slow-bandwidth RANK:RATE]
         [--skip 2] [--with-none-off]
         [--timeline FILE.json] -- APP TRAIN_ARGS...
e.g.   scripts/balancer-bench.py --reps 3 -- mf --mode classic \\
           --synthetic rows=20000,cols=10000,rank=10,nnz=1e6,test=0.1,seed=1 --epochs 8
(`--profile` and `--slow` need root: network namespaces and cpu cgroups.)
"""
import argparse
import json
import statistics
import subprocess
import sys

import roam_report  # scripts/roam_report.py: reports from old and new binaries


def run(args, config, train_args):
    cmd = [args.roam, "launch", "--nodes", str(args.nodes), "--workers-per-node", "1"]
    if args.profile:
        cmd += ["--profile", args.profile]
    if config in ("off", "on"):
        if args.slow_bandwidth:
            cmd += ["--node-bandwidth", args.slow_bandwidth]
        else:
            cmd += ["--slow-node", args.slow, "--slow-scope", args.scope]
    cmd += ["--balancer", "off" if config.endswith("off") else "on"]
    cmd += ["--", args.roam, "train", *train_args]
    cmd = roam_report.with_json(cmd)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    report = roam_report.find_report(out.stdout)
    stats = (roam_report.node_stats(out.stdout, rank=0) or [None])[-1]
    if report is None:
        raise RuntimeError("no report line from rank 0:\n" + out.stdout[-3000:])
    epochs = report["epochs"]
    seconds = [e["seconds"] for e in epochs]
    steady = seconds[args.skip:] or seconds
    ends, t = [], 0.0
    for e in epochs:
        t += e["seconds"] + e.get("eval_seconds", 0.0)
        ends.append(t)
    return {
        "steady_s_per_epoch": statistics.mean(steady),
        "s_per_epoch": statistics.mean(seconds),
        "moves": (stats or {}).get("balancer_moves", 0),
        "mb_moved": (stats or {}).get("balancer_bytes", 0) / 1e6,
        "epochs": [{"end_s": end, "seconds": s} for end, s in zip(ends, seconds)],
        "decisions": (stats or {}).get("balance_decisions", []),
    }


def fmt(values):
    med = statistics.median(values)
    return f"{med:.3f} ({min(values):.3f}–{max(values):.3f})"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--roam", default="target/release/roam")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--profile", default="10gbe")
    p.add_argument("--slow", default="2:40", help="RANK:FACTOR[@START[-END]] of --slow-node")
    p.add_argument("--scope", default="service", choices=["protocol", "process", "service"])
    p.add_argument("--slow-bandwidth", metavar="RANK:RATE",
                   help="a bandwidth straggler (--node-bandwidth) instead of --slow")
    p.add_argument("--skip", type=int, default=2, help="epochs left out of the steady figure")
    p.add_argument("--with-none-off", action="store_true")
    p.add_argument("--timeline", help="write every run's epochs and decisions here (JSON)")
    p.add_argument("train", nargs=argparse.REMAINDER)
    args = p.parse_args()
    train_args = args.train[1:] if args.train[:1] == ["--"] else args.train
    if not train_args:
        p.error("give the training job after --, e.g. -- mf --mode classic")
    configs = ["none", "off", "on"] + (["none-off"] if args.with_none_off else [])
    results = {c: [] for c in configs}
    for rep in range(args.reps):
        for config in configs:
            r = run(args, config, train_args)
            results[config].append(r)
            print(f"rep {rep + 1} {config:8}: {r['steady_s_per_epoch']:.3f} s/epoch steady, "
                  f"{r['s_per_epoch']:.3f} all, {r['moves']} moves", file=sys.stderr)
    straggler = (f"--node-bandwidth {args.slow_bandwidth}" if args.slow_bandwidth
                 else f"--slow-node {args.slow} --slow-scope {args.scope}")
    print(f"\n{' '.join(train_args)}: {args.nodes} nodes, {args.profile or 'loopback'}, "
          f"{straggler}, {args.reps} reps, steady = "
          f"epochs {args.skip + 1}+ (median (min–max))\n")
    print("| config | s/epoch steady | s/epoch all | balancer moves | MB moved |")
    print("|---|---|---|---|---|")
    for c in configs:
        rs = results[c]
        print(f"| {c} | {fmt([r['steady_s_per_epoch'] for r in rs])} | "
              f"{fmt([r['s_per_epoch'] for r in rs])} | "
              f"{statistics.median([r['moves'] for r in rs]):.0f} | "
              f"{statistics.median([r['mb_moved'] for r in rs]):.2f} |")
    med = {c: statistics.median([r["steady_s_per_epoch"] for r in results[c]]) for c in configs}
    print(f"\nsteady ratios of medians: off/on = {med['off'] / med['on']:.2f} (balancer's gain), "
          f"on/none = {med['on'] / med['none']:.2f} (straggler's cost left)")
    if args.timeline:
        with open(args.timeline, "w") as f:
            json.dump({"job": train_args, "slow": None if args.slow_bandwidth else args.slow,
                       "slow_bandwidth": args.slow_bandwidth, "scope": args.scope,
                       "nodes": args.nodes, "profile": args.profile, "runs": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
