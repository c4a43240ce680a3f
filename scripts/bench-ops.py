#!/usr/bin/env python3
"""Runs `roam bench ops` over the configuration matrix of docs/benchmarks.md and prints a
markdown table of medians (min-max) over repetitions.

Usage: scripts/bench-ops.py [--reps 3] [--seconds 2] [--quick] [--latency-us L]
                            [--profile loopback|10gbe|1gbe] [--out FILE.json]
       scripts/bench-ops.py --ab OLD_ROAM NEW_ROAM [--reps 5] [--seconds 2]
(`--ab` runs the two builds alternately in the Lapse target configuration — 2 nodes x 1 worker,
100k keys x 10 floats, batch 100 — and prints each figure's median and range per build and
the ratio new/old of the medians; scripts/ab-bench.sh builds the two binaries.)
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


def run(nodes, workers, keys, value_len, batch, seconds, latency, extra, profile=None, roam=None):
    roam = roam or ROAM
    cmd = [roam, "launch", "--nodes", str(nodes), "--workers-per-node", str(workers)]
    if profile:
        cmd += ["--profile", profile]
    if latency:
        cmd += ["--latency-us", str(latency)]
    cmd += ["--", roam, "bench", "ops", "--keys", str(keys), "--value-len", str(value_len),
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


AB_FIELDS = [
    ("local_pull_keys_per_s", "local pull keys/s"),
    ("local_push_keys_per_s", "local push keys/s"),
    ("remote_pull_keys_per_s", "remote pull keys/s"),
    ("remote_push_keys_per_s", "remote push keys/s"),
    ("remote_pull_p50_us", "sync remote pull p50 µs"),
    ("relocate_keys_per_s", "relocate keys/s"),
    ("reference_matched_rows_per_s", "matched copy reference rows/s"),
    ("reference_matched_add_rows_per_s", "matched add reference rows/s"),
]


def ab(old, new, reps, seconds):
    """Alternates old and new builds, so that drift of the machine hits both alike."""
    runs = {"old": [], "new": []}
    for rep in range(reps):
        for name, binary in (("old", old), ("new", new)):
            runs[name].append(run(2, 1, 100_000, 10, 100, seconds, 0, [], roam=binary))
            print(f"rep {rep + 1}/{reps} {name} done", file=sys.stderr, flush=True)
    print(f"| figure | old: median (range) | new: median (range) | new/old |")
    print("|---|---|---|---|")
    for field, label in AB_FIELDS:
        o = [r.get(field) for r in runs["old"] if r.get(field) is not None]
        n = [r.get(field) for r in runs["new"] if r.get(field) is not None]
        ratio = f"{statistics.median(n) / statistics.median(o):.3f}" if o and n else "–"
        print(f"| {label} | {fmt(o)} | {fmt(n)} | {ratio} |")
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ab", nargs=2, metavar=("OLD_ROAM", "NEW_ROAM"),
                    help="A/B mode: two roam binaries, run alternately")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--quick", action="store_true", help="only the Lapse target configuration")
    ap.add_argument("--latency-us", type=int, default=0)
    ap.add_argument("--profile", help="network profile of roam launch (10gbe and 1gbe need root)")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.ab:
        runs = ab(args.ab[0], args.ab[1], args.reps, args.seconds)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(runs, f, indent=1)
        return 0
    if args.quick:
        matrix = [(1, 100_000, 10, 100), (1, 100_000, 10, 1)]
    else:
        matrix = [(w, k, v, b) for w, k, v, b in itertools.product([1, 2], [100_000, 1_000_000], [10, 100], [1, 100])]
    records = []
    matched = []
    print("| workers/node | keys | value len | batch | " + " | ".join(name for _, name in FIELDS) + " |")
    print("|" + "---|" * (4 + len(FIELDS)))
    for workers, keys, value_len, batch in matrix:
        runs = [run(2, workers, keys, value_len, batch, args.seconds, args.latency_us, [], args.profile)
                for _ in range(args.reps)]
        records.extend(runs)
        cells = [fmt([r.get(field) for r in runs]) for field, _ in FIELDS]
        print(f"| {workers} | {keys:,} | {value_len} | {batch} | " + " | ".join(cells) + " |", flush=True)
        matched.append((workers, keys, value_len, batch, runs))
    print("\nMatched references: one thread copying (adding into) random rows of the same shape"
          " (rows, length, batch), indices drawn before the clock; local pull and push per worker"
          " thread (2 nodes) as a fraction of the copy (the aim is at least 0.5), and push as a"
          " fraction of the add, its own physical shape:\n")
    print("| workers/node | keys | value len | batch | copy rows/s | add rows/s | local pull / thread / copy | local push / thread / copy | local push / thread / add |")
    print("|---|---|---|---|---|---|---|---|---|")
    for workers, keys, value_len, batch, runs in matched:
        threads = 2 * workers
        refs = [r.get("reference_matched_rows_per_s") for r in runs]
        add_refs = [r.get("reference_matched_add_rows_per_s") for r in runs]
        def frac(field, ref="reference_matched_rows_per_s"):
            vals = [r[field] / threads / r[ref] for r in runs if r.get(field) and r.get(ref)]
            if not vals:
                return "-"
            vals.sort()
            return f"{statistics.median(vals):.2f} ({vals[0]:.2f}–{vals[-1]:.2f})"
        print(f"| {workers} | {keys:,} | {value_len} | {batch} | {fmt(refs)} | {fmt(add_refs)} | "
              f"{frac('local_pull_keys_per_s')} | {frac('local_push_keys_per_s')} | "
              f"{frac('local_push_keys_per_s', 'reference_matched_add_rows_per_s')} |")
    ref = [run(2, 1, 1000, 10, 1, 0.1, 0, [])["reference_row_copy_rows_per_s"] for _ in range(args.reps)]
    print(f"\nReference (one thread copying random 400-byte rows of a 1M-row array): {fmt(ref)} rows/s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
