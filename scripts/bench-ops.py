#!/usr/bin/env python3
"""Runs `roam bench ops` over the configuration matrix of docs/benchmarks.md and prints a
markdown table of medians (min-max) over repetitions.

Usage: scripts/bench-ops.py [--reps 3] [--seconds 2] [--quick] [--latency-us L]
                            [--profile loopback|10gbe|1gbe] [--out FILE.json]
(`--profile 10gbe|1gbe` runs the nodes in network namespaces: root only.)
Needs target/release/roam (cargo build --release -p roam-cli).
"""
import argparse
import itertools
import json
import statistics
import subprocess
import sys

ROAM = "target/release/roam"
FIELDS = [
    ("local_pull_keys_per_s", "local pull keys/s"),
    ("local_push_keys_per_s", "local push keys/s"),
    ("remote_pull_keys_per_s", "remote pull keys/s"),
    ("remote_push_keys_per_s", "remote push keys/s"),
    ("remote_pull_p50_us", "remote pull p50 µs"),
    ("remote_pull_p99_us", "remote pull p99 µs"),
    ("relocate_keys_per_s", "relocate keys/s"),
    ("localize_p50_us", "localize p50 µs"),
]


def run(nodes, workers, keys, value_len, batch, seconds, latency, extra, profile=None):
    cmd = [ROAM, "launch", "--nodes", str(nodes), "--workers-per-node", str(workers)]
    if profile:
        cmd += ["--profile", profile]
    if latency:
        cmd += ["--latency-us", str(latency)]
    cmd += ["--", ROAM, "bench", "ops", "--keys", str(keys), "--value-len", str(value_len),
            "--batch", str(batch), "--seconds", str(seconds)] + extra
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        body = line.split("] ", 1)[-1]
        if body.startswith("{") and '"bench":"ops"' in body:
            return json.loads(body)
    raise RuntimeError("no bench line in output:\n" + out)


def fmt(values):
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    med = statistics.median(values)
    big = med >= 1000
    f = (lambda v: f"{v / 1e6:.2f} M" if v >= 1e6 else f"{v / 1e3:.1f} k") if big else (lambda v: f"{v:.1f}")
    return f"{f(med)} ({f(min(values))}–{f(max(values))})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--quick", action="store_true", help="only the Lapse target configuration")
    ap.add_argument("--latency-us", type=int, default=0)
    ap.add_argument("--profile", help="network profile of roam launch (10gbe and 1gbe need root)")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.quick:
        matrix = [(1, 100_000, 10, 100), (1, 100_000, 10, 1)]
    else:
        matrix = [(w, k, v, b) for w, k, v, b in itertools.product([1, 2], [100_000, 1_000_000], [10, 100], [1, 100])]
    records = []
    print("| workers/node | keys | value len | batch | " + " | ".join(name for _, name in FIELDS) + " |")
    print("|" + "---|" * (4 + len(FIELDS)))
    for workers, keys, value_len, batch in matrix:
        runs = [run(2, workers, keys, value_len, batch, args.seconds, args.latency_us, [], args.profile)
                for _ in range(args.reps)]
        records.extend(runs)
        cells = [fmt([r.get(field) for r in runs]) for field, _ in FIELDS]
        print(f"| {workers} | {keys:,} | {value_len} | {batch} | " + " | ".join(cells) + " |", flush=True)
    ref = [run(2, 1, 1000, 10, 1, 0.1, 0, [])["reference_row_copy_rows_per_s"] for _ in range(args.reps)]
    print(f"\nReference (one thread copying random 400-byte rows of a 1M-row array): {fmt(ref)} rows/s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
