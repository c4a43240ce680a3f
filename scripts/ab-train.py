#!/usr/bin/env python3
"""A/B of a change on a whole training run: runs `roam train APP ...` with two builds
alternately (under `roam launch` for several nodes) and prints, per build, the median and range
over repetitions of the figures that decide whether a parameter server pays: training CPU
seconds per epoch summed over nodes (evaluation excluded), seconds per epoch, bytes sent per
epoch, the local fraction and the quality metric of the last epoch; then the ratio new/old of
the medians. Wall times on shared VMs are noisy: alternate the builds, use several repetitions
and read the ranges.

Usage: scripts/ab-train.py OLD_ROAM NEW_ROAM [--reps 3] [--nodes 4] [--workers-per-node 1]
                           [--profile 10gbe] [--out FILE.json] -- APP TRAIN_ARGS...
e.g.   scripts/ab-train.py .ab-target/release/roam target/release/roam --nodes 4 -- \
           w2v --mode nups --data data/gcide/corpus.txt --epochs 1 --heldout 0
scripts/ab-train.sh OLD_REV ... builds the old binary and calls this with the working tree's.
(`--profile 10gbe|1gbe` runs the nodes in network namespaces: root only.)
"""
import argparse
import json
import statistics
import subprocess
import sys

import roam_report  # scripts/roam_report.py: reports from old and new binaries

FIGURES = [
    ("train_cpu_per_epoch", "train CPU s/epoch (all nodes)"),
    ("seconds_per_epoch", "s/epoch"),
    ("gb_per_epoch", "GB sent/epoch"),
    ("local_fraction", "local fraction"),
    ("quality", "quality (last epoch)"),
]

# The first of these that the last epoch reports is the quality figure (named in the table).
QUALITY_KEYS = ["wordsim_spearman", "test_auc", "topic_auc", "pair_auc", "heldout_auc", "mrr", "test_rmse",
                "rmse", "loss"]


def run(roam, nodes, workers, profile, train_args):
    # Through the launcher even for one node: it sets the workers per node the same way for
    # every app (`roam train ctr` has no `--workers-per-node` of its own).
    cmd = [roam, "launch", "--nodes", str(nodes), "--workers-per-node", str(workers)]
    if profile and nodes > 1:
        cmd += ["--profile", profile]
    cmd += ["--", roam, "train", *train_args]
    # The old build may predate `--json` (it always printed the report): ask each binary.
    cmd = roam_report.with_json(cmd)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    report = roam_report.find_report(out.stdout)
    if report is not None:
        return summarize(report)
    raise RuntimeError("no report line in the output:\n" + out.stdout[-3000:])


def summarize(report):
    epochs = report["epochs"]
    n = len(epochs)
    # The apps read an epoch's CPU before its evaluation and leave evaluations out of the next
    # epoch's window, so `cpu_seconds` is training alone (`eval_cpu_seconds` is not in it).
    train_cpu = sum(e["cpu_seconds"] for e in epochs) / n
    last = epochs[-1]
    metric = next((k for k in QUALITY_KEYS if last.get(k) is not None), None)
    quality = last[metric] if metric else None
    return {
        "train_cpu_per_epoch": train_cpu,
        "seconds_per_epoch": sum(e["seconds"] for e in epochs) / n,
        "gb_per_epoch": report.get("bytes_sent", 0) / 1e9 / n,
        "local_fraction": report.get("local_fraction"),
        "quality": quality,
        "metric": metric,
    }


def fmt(values):
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    med = statistics.median(values)
    return f"{med:.3f} ({min(values):.3f}–{max(values):.3f})"


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("usage: ab-train.py OLD_ROAM NEW_ROAM [options] -- APP TRAIN_ARGS...")
    split = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--workers-per-node", type=int, default=1)
    ap.add_argument("--profile", default="10gbe", help="roam launch's network profile")
    ap.add_argument("--out")
    args = ap.parse_args(argv[:split])
    train_args = argv[split + 1:]
    runs = {"old": [], "new": []}
    for rep in range(args.reps):
        for name in ("old", "new"):
            roam = getattr(args, name)
            result = run(roam, args.nodes, args.workers_per_node, args.profile, train_args)
            runs[name].append(result)
            print(f"rep {rep + 1} {name}: " + ", ".join(
                f"{k}={v:.3f}" for k, v in result.items() if isinstance(v, float)),
                file=sys.stderr)
    print(f"roam train {' '.join(train_args)} — {args.nodes} nodes x {args.workers_per_node} "
          f"workers, {args.profile if args.nodes > 1 else 'one process'}, {args.reps} reps")
    print("| figure | old | new | new/old |")
    print("|---|---|---|---|")
    metric = next((r["metric"] for r in runs["new"] + runs["old"] if r["metric"]), "–")
    for key, label in FIGURES:
        if key == "quality":
            label = f"quality: {metric} (last epoch)"
        old = [r[key] for r in runs["old"] if r[key] is not None]
        new = [r[key] for r in runs["new"] if r[key] is not None]
        ratio = (f"{statistics.median(new) / statistics.median(old):.3f}"
                 if old and new and statistics.median(old) else "–")
        print(f"| {label} | {fmt(old)} | {fmt(new)} | {ratio} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": train_args, "nodes": args.nodes, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
