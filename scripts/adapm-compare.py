#!/usr/bin/env python3
"""AdaPM's comparison (issue #15): `adapm` against the best of `lapse`, `nups` with its default
heuristic, and `nups` with a 5-point sweep of its replicated count — as in the AdaPM paper's
baseline — on the same data, machine and network profile.

Input: a `roam bench suite` results.json that has the modes to compare (single, lapse, nups,
adapm, and optionally the adapm ablations). For every nups configuration in it (app, profile,
nodes), this script re-runs the suite's own nups command with `--replicate-top K` for five
counts K, `--reps` times each, and then prints one markdown table: per configuration the epoch
time and CPU × single of every mode (median over repetitions of the mean over epochs), the
best baseline, and adapm's ratio to it.

Sweep points: KGE's `--replicate-top K` replicates K entities plus every relation; the points
are 0, 1 %, 5 %, 20 % and 50 % of the entities. Elsewhere (w2v, mf) they are the default
heuristic's count h times 1/4, 1/2, 1, 2 and 4 (within 1 .. the key count), or, where the
heuristic replicates fewer than 4 keys, 1 %, 5 %, 10 %, 25 % and 50 % of the keys.

Usage:
  sudo target/release/roam bench suite --quick --apps kge,w2v,mf \\
      --modes single,lapse,nups,adapm,adapm-relocate-only,adapm-replicate-only \\
      --nodes 2,4 --profiles 10gbe --reps 2
  sudo python3 scripts/adapm-compare.py bench-results/<time>/results.json --reps 2
"""

import argparse
import json
import statistics
import subprocess
import sys
from collections import defaultdict

import roam_report  # scripts/roam_report.py: reports from old and new binaries


def epoch_means(epochs):
    """Mean epoch seconds and CPU seconds (all nodes) over a run's epochs."""
    secs = [e["seconds"] for e in epochs if "seconds" in e]
    cpus = [e["cpu_seconds"] for e in epochs if "cpu_seconds" in e]
    if not secs or not cpus:
        return None
    return statistics.mean(secs), statistics.mean(cpus)


def report_of(output):
    """The app's JSON report (rank 0's line with an `epochs` array) in a launch's output."""
    return roam_report.find_report(output)


def sweep_points(run):
    """The five `--replicate-top` counts for a nups run."""
    settings = run.get("settings") or {}
    replication = (run.get("replica") or {}).get("replication") or {}
    if run["app"] == "kge":
        entities = int(settings["entities"])
        return sorted({0, entities // 100, entities // 20, entities // 5, entities // 2})
    keys = int(settings.get("vocab") or settings.get("cols") or 0)
    h = int(replication.get("replicated_keys") or 0)
    if h < 4 and keys > 0:
        # The heuristic replicates (nearly) nothing: sweep fractions of the keys instead.
        return sorted({max(1, round(keys * f)) for f in (0.01, 0.05, 0.1, 0.25, 0.5)})
    if keys <= 0:
        keys = 4 * h
    return sorted({max(1, min(keys, round(h * f))) for f in (0.25, 0.5, 1, 2, 4)})


def run_sweep(run, k, reps, timeout):
    """Medians (epoch s, CPU s) of `reps` runs of `run`'s command with `--replicate-top k`."""
    # Commands recorded by suites that predate `--json` lack it.
    cmd = roam_report.with_json(list(run["command"]) + ["--replicate-top", str(k)])
    got = []
    for _ in range(reps):
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"  timed out: {' '.join(cmd)}", file=sys.stderr)
            continue
        report = report_of(proc.stdout + proc.stderr)
        if proc.returncode != 0 or report is None:
            print(f"  failed ({proc.returncode}): {' '.join(cmd)}", file=sys.stderr)
            continue
        means = epoch_means(report["epochs"])
        if means:
            got.append(means)
    if not got:
        return None
    return statistics.median(g[0] for g in got), statistics.median(g[1] for g in got)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="a roam bench suite results.json")
    ap.add_argument("--reps", type=int, default=2, help="repetitions per sweep point")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    ap.add_argument("--no-sweep", action="store_true", help="only the suite's modes")
    args = ap.parse_args()

    runs = json.load(open(args.results))["runs"]
    by = defaultdict(list)  # (app, profile, nodes, mode) -> [(epoch s, cpu s)]
    first = {}
    single = {}
    late = {}
    local = {}
    for r in runs:
        if r.get("status") not in (None, "ok") or not r.get("epochs"):
            continue
        means = epoch_means(r["epochs"])
        if not means:
            continue
        if r["mode"] == "single":
            single.setdefault(r["app"], []).append(means[1])
            continue
        key = (r["app"], r["profile"], r["nodes"], r["mode"])
        by[key].append(means)
        first.setdefault(key, r)
        intents = [e.get("intents") for e in r["epochs"] if e.get("intents")]
        if intents:
            n = sum(i["intents"] for i in intents)
            late.setdefault(key, []).append(sum(i["late_intents"] for i in intents) / max(n, 1))
        if r.get("counters", {}) and isinstance(r["counters"], dict):
            lf = r["counters"].get("local_fraction")
            if lf is not None:
                local.setdefault(key, []).append(lf)

    med = {k: (statistics.median(v[0] for v in vs), statistics.median(v[1] for v in vs))
           for k, vs in by.items()}
    if not args.no_sweep:
        for key, run in sorted(first.items()):
            if key[3] != "nups":
                continue
            for k in sweep_points(run):
                print(f"sweep {key} --replicate-top {k}", file=sys.stderr)
                got = run_sweep(run, k, args.reps, args.timeout)
                if got:
                    med[key[:3] + (f"nups[top {k}]",)] = got

    configs = sorted({k[:3] for k in med})
    modes = ["lapse", "nups", "adapm", "adapm-relocate-only", "adapm-replicate-only"]
    print("| app | profile | nodes | best baseline | its epoch s | adapm epoch s | adapm / best "
          "| CPU × single: lapse | nups | best nups sweep | adapm | relocate-only | "
          "replicate-only | adapm late |")
    print("|" + "---|" * 14)
    for cfg in configs:
        base = {m: v for (a, p, n, m), v in med.items() if (a, p, n) == cfg}
        s = statistics.median(single.get(cfg[0], [float("nan")]))
        candidates = {m: v for m, v in base.items() if m == "lapse" or m.startswith("nups")}
        if not candidates or "adapm" not in base:
            continue
        best = min(candidates, key=lambda m: candidates[m][0])
        sweep = {m: v for m, v in base.items() if m.startswith("nups[")}
        best_sweep = min(sweep.values(), key=lambda v: v[0]) if sweep else None

        def cpu(v):
            return f"{v[1] / s:.2f}" if v else "–"

        lates = late.get(cfg + ("adapm",))
        late_text = f"{statistics.median(lates) * 100:.1f} %" if lates else "–"
        print(f"| {cfg[0]} | {cfg[1]} | {cfg[2]} | {best} | {candidates[best][0]:.3f} "
              f"| {base['adapm'][0]:.3f} | {base['adapm'][0] / candidates[best][0]:.2f} "
              f"| {cpu(base.get('lapse'))} | {cpu(base.get('nups'))} | {cpu(best_sweep)} "
              f"| {cpu(base.get('adapm'))} | {cpu(base.get('adapm-relocate-only'))} "
              f"| {cpu(base.get('adapm-replicate-only'))} | {late_text} |")
    print()
    print("Every configuration and mode (median epoch s, CPU × single):")
    for (a, p, n, m), v in sorted(med.items()):
        s = statistics.median(single.get(a, [float("nan")]))
        print(f"  {a} {p} n{n} {m}: {v[0]:.3f} s, CPU × single {v[1] / s:.2f}")


if __name__ == "__main__":
    main()
