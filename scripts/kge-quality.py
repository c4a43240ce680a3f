#!/usr/bin/env python3
"""KGE quality over many seeds, per mode: the measurement behind docs/workloads-kge.md.

One run's filtered MRR on lapse-toy varies by about ±0.03 between seeds, so settings can only be
told apart by means over many seeds. This runs `roam train kge` once per (mode, seed), single
mode as one node with as many workers as the others have in all, and the others under
`roam launch` (2 nodes × 2 workers unless `--nodes` / `--workers-per-node` say otherwise),
evaluating after every epoch, and prints for each mode and each `--at` epoch the mean ±
standard error and the range of valid and test MRR, and the mean Hits@10; then, per mode, the
median over runs of each run's median epoch time and CPU seconds (training only, summed over
nodes), the mean local fraction, and messages and MB sent per epoch.

    python3 scripts/kge-quality.py --seeds 101-130                      # the defaults
    python3 scripts/kge-quality.py --seeds 1-20 --modes single,lapse -- --eta 0.1 --gamma 0.2
    python3 scripts/kge-quality.py --jsonl runs.jsonl ...               # also keep every report
    python3 scripts/kge-quality.py --nodes 4 --workers-per-node 1 --profile 10gbe \
        --modes single,nups,nups:preloc --seeds 1-8                   # sampling schemes, 10gbe

Arguments after `--` go to `roam train kge` unchanged.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import roam_report  # scripts/roam_report.py: reports from old and new binaries

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--roam", default=os.path.join(ROOT, "target", "release", "roam"))
    p.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "lapse-toy", "kge"),
                   help="a dataset directory, or synthetic:SPEC (roam train kge --synthetic SPEC)")
    p.add_argument("--modes", default="single,lapse,classic,classic-nolocal",
                   help="modes, each optionally with a sampling scheme: nups:preloc, lapse:pool:4")
    p.add_argument("--nodes", type=int, default=2, help="nodes of the distributed modes")
    p.add_argument("--workers-per-node", type=int, default=2,
                   help="of the distributed modes; single runs nodes × this many threads")
    p.add_argument("--profile", help="network profile of the distributed modes (roam launch --profile)")
    p.add_argument("--seeds", default="101-130", help="inclusive range, e.g. 1-30")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--at", default="2,12", help="epochs to summarise")
    p.add_argument("--jsonl", help="append every run's report to this file")
    p.add_argument("extra", nargs="*", help="passed to `roam train kge`")
    a = p.parse_args()
    lo, _, hi = a.seeds.partition("-")
    a.seed_range = range(int(lo), int(hi or lo) + 1)
    a.at_epochs = [int(x) for x in a.at.split(",")]
    if max(a.at_epochs) > a.epochs:
        p.error(f"--at {a.at}: the run has only {a.epochs} epochs")
    return a


def run_once(a, spec, seed):
    mode, _, scheme = spec.partition(":")
    sampling = ["--sampling", scheme] if scheme else []
    data = (["--synthetic", a.data[len("synthetic:"):]] if a.data.startswith("synthetic:")
            else ["--data", a.data])
    train = [a.roam, "train", "kge", "--mode", mode, *data, "--epochs", str(a.epochs),
             "--eval-every", "1", "--eval-valid", "--seed", str(seed), *sampling, *a.extra]
    threads = a.nodes * a.workers_per_node
    if mode == "single":
        cmd = train + ([] if "--workers-per-node" in a.extra else ["--workers-per-node", str(threads)])
    else:
        profile = ["--profile", a.profile] if a.profile else []
        cmd = [a.roam, "launch", "--nodes", str(a.nodes), "--workers-per-node",
               str(a.workers_per_node), *profile, "--", *train]
    cmd = roam_report.with_json(cmd)
    r = subprocess.run(cmd, capture_output=True, text=True)
    report = roam_report.find_report(r.stdout)
    if report is not None:
        return report
    sys.exit(f"{mode} seed {seed}: no report (exit {r.returncode})\n{' '.join(cmd)}\n{r.stderr[-2000:]}")


def summary(values):
    mean = statistics.mean(values)
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
    return f"{mean:.4f}±{se:.4f} [{min(values):.3f}–{max(values):.3f}]"


def main():
    a = parse_args()
    log = open(a.jsonl, "a") if a.jsonl else None
    for mode in a.modes.split(","):
        reports = []
        for seed in a.seed_range:
            report = run_once(a, mode, seed)
            reports.append(report)
            if log:
                log.write(json.dumps({"seed": seed, "extra": a.extra, "report": report}) + "\n")
                log.flush()
        for e in a.at_epochs:
            epochs = [r["epochs"][e - 1] for r in reports]
            h10 = statistics.mean(x["hits_at_10"] for x in epochs)
            print(f"{mode:16s} n={len(reports)} @{e:<3d} valid {summary([x['valid_mrr'] for x in epochs])}"
                  f"  test {summary([x['mrr'] for x in epochs])}  hits@10 {h10:.3f}", flush=True)
        def per_run_median(field):
            return statistics.median(statistics.median(x[field] for x in r["epochs"]) for r in reports)

        def per_epoch(field):
            return statistics.mean(r[field] / len(r["epochs"]) for r in reports)

        print(f"{mode:16s} s/epoch {per_run_median('seconds'):.4f}  cpu s/epoch {per_run_median('cpu_seconds'):.4f}"
              f"  local {statistics.mean(r['local_fraction'] for r in reports):.3f}"
              f"  messages/epoch {per_epoch('messages_sent'):.0f}  MB/epoch {per_epoch('bytes_sent') / 1e6:.1f}",
              flush=True)


if __name__ == "__main__":
    main()
