#!/usr/bin/env python3
"""Sync cost of replicated keys: runs `roam bench replicas` under `roam launch` for several node
counts and numbers of keys updated per node and step, and prints a markdown table of medians
over nodes and repetitions (with ranges): bytes sent per sync round per node, replicated keys
sent and received per round per node, `sync_replicas` latency, and staleness of remote updates.

Usage: scripts/bench-replicas.py [--nodes 2,3,4,8] [--updated 100,1000,10000] [--keys 10000]
       [--value-len 100] [--steps 30] [--sync-every-ms 10] [--reps 2] [--out FILE.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROAM = os.environ.get("ROAM_BIN", os.path.join(os.path.dirname(__file__), "..", "target", "release", "roam"))


def run(nodes, keys, value_len, updated, steps, sync_every_ms):
    cmd = [ROAM, "launch", "--nodes", str(nodes), "--", ROAM, "bench", "replicas",
           "--keys", str(keys), "--value-len", str(value_len), "--updated", str(updated),
           "--rounds", str(steps), "--sync-every-ms", str(sync_every_ms)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    lines = []
    for line in out.splitlines():
        body = line.split("] ", 1)[-1]
        if body.startswith("{") and '"bench":"replicas"' in body:
            lines.append(json.loads(body))
    if len(lines) != nodes:
        raise RuntimeError(f"expected {nodes} bench lines, got {len(lines)}:\n{out}")
    return lines


def fmt(values, scale=1.0, digits=0):
    values = sorted(v / scale for v in values)
    med = statistics.median(values)
    return f"{med:,.{digits}f} ({values[0]:,.{digits}f}–{values[-1]:,.{digits}f})"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="2,3,4,8")
    p.add_argument("--updated", default="100,1000,10000")
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--value-len", type=int, default=100)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--sync-every-ms", type=float, default=10.0)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--out")
    args = p.parse_args()
    records = []
    print(f"{args.keys:,} replicated keys of {args.value_len} floats, sync every {args.sync_every_ms} ms,"
          f" {args.steps} steps of (push to U keys per node, sync_replicas); medians over nodes and"
          f" {args.reps} repetitions (min–max)\n")
    print("| nodes | U (keys updated / node / step) | KB sent / round / node | keys sent / round | keys received / round | sync_replicas p50 ms | staleness p50 ms | staleness p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for nodes in [int(n) for n in args.nodes.split(",")]:
        for updated in [int(u) for u in args.updated.split(",")]:
            lines = []
            for _ in range(args.reps):
                lines += run(nodes, args.keys, args.value_len, updated, args.steps, args.sync_every_ms)
            records += lines
            col = lambda k: [line[k] for line in lines]
            print(f"| {nodes} | {updated:,} | {fmt(col('bytes_per_round'), 1e3)} | "
                  f"{fmt(col('keys_sent_per_round'))} | {fmt(col('keys_received_per_round'))} | "
                  f"{fmt(col('sync_p50_us'), 1e3, 1)} | {fmt(col('staleness_p50_us'), 1e3, 1)} | "
                  f"{fmt(col('staleness_p99_us'), 1e3, 1)} |", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
