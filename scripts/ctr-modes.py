#!/usr/bin/env python3
"""Runs `roam train ctr` in several modes, interleaved, and prints one markdown table row per
mode: test AUC after the last epoch (median, range), the last epoch's loss, rows per second,
CPU seconds per epoch summed over the nodes (median, range), its ratio to single's median in the
same batch, the local fraction, the MB sent and, in the NuPS modes, the replicated keys, rows
and share of row accesses (docs/workloads-ctr.md, "NuPS modes").

Usage: scripts/ctr-modes.py [--roam target/release/roam] [--data data/ml-100k-ctr]
           [--modes single,classic,lapse,nups,nups-replicate-only,adapm] [--nodes 2] [--reps 3]
           [--profile loopback|10gbe|1gbe]
           [-- EXTRA ARGS of every distributed run]
Without --data the app's embedded synthetic set is used.
"""
import argparse
import json
import statistics as st
import subprocess
import sys


def report(stdout):
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("[node"):
            line = line.split("] ", 1)[1]
        if line.startswith("{") and "roam_node_stats" not in line:
            return json.loads(line)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--roam", default="target/release/roam")
    ap.add_argument("--data", default=None)
    ap.add_argument("--modes", default="single,classic,lapse,nups,nups-replicate-only,adapm")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--profile", default="loopback", help="roam launch's network profile")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("extra", nargs="*", help="arguments of every distributed run (after --)")
    a = ap.parse_args()
    modes = a.modes.split(",")
    results = {m: [] for m in modes}
    for _ in range(a.reps):
        for mode in modes:
            cmd = [a.roam, "train", "ctr", "--mode", mode, "--json"]
            if a.data:
                cmd += ["--data", a.data]
            if mode != "single":
                cmd = [a.roam, "launch", "--nodes", str(a.nodes), "--profile", a.profile,
                       "--"] + cmd + a.extra
            run = subprocess.run(cmd, capture_output=True, text=True)
            r = report(run.stdout)
            if run.returncode != 0 or r is None:
                sys.exit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr[-2000:]}")
            ep = r["epochs"]
            results[mode].append({
                "auc": ep[-1]["test_auc"],
                "loss": ep[-1]["loss"],
                "rows": st.mean(e["rows_per_second"] for e in ep),
                "cpu": st.mean(e["cpu_seconds"] for e in ep),
                "local": ep[-1]["local_fraction"],
                "mb": r["bytes_sent"] / 1e6,
                "rep": r["settings"].get("replication"),
            })

    def spread(rs, key, fmt):
        v = [x[key] for x in rs]
        return f"{fmt.format(st.median(v))} ({fmt.format(min(v))}–{fmt.format(max(v))})"

    def replicated(rep):
        if not rep:
            return "  |"
        return (f" {rep['replicated_keys']} keys ({rep['replicated_rows']} rows, "
                f"{rep['access_fraction']:.0%} of row accesses) |")

    single = st.median(x["cpu"] for x in results["single"]) if "single" in results else None
    for mode in modes:
        rs = results[mode]
        ratio = f"{st.median(x['cpu'] for x in rs) / single:.2f}" if single else "–"
        nodes = 1 if mode == "single" else a.nodes
        print(f"| {mode} | {nodes} | {spread(rs, 'auc', '{:.4f}')} | "
              f"{st.median(x['loss'] for x in rs):.4f} | {spread(rs, 'rows', '{:,.0f}')} | "
              f"{spread(rs, 'cpu', '{:.2f}')} | {ratio} | {st.median(x['local'] for x in rs):.3f} | "
              f"{st.median(x['mb'] for x in rs):.1f} |{replicated(rs[0]['rep'])}")


if __name__ == "__main__":
    main()
