#!/usr/bin/env python3
"""Per-call time of a worker's pull and push_gradients of the same ids on one node, in a dense
key space, a sparse key space and a named table (docs/benchmarks.md, "Sparse keys looked up
without a lock"): what the store's key -> state-word lookup costs on each.

    python scripts/lookup-bench.py [--ids 8803] [--calls 300] [--runs 3]

Needs the roam Python package (scripts/python-test.sh installs it into a venv). Rows have one
value and an FTRL optimizer (as the Wide&Deep example's wide table); every id is created and
stepped once before timing. Prints one line per space and run: microseconds per pull and per
push_gradients (wall time: compare builds on a quiet machine, in the same session)."""

import argparse
import time

import numpy as np
import roam

FTRL = {"kind": "ftrl", "alpha": 0.5}


def node_for(space: str):
    if space == "table":
        node = roam.Node(
            tables={"wide": {"dim": 1, "num_ids": 1 << 20, "optimizer": FTRL}},
            allocation="static-hash",
        )
        return node, {"table": "wide"}
    if space == "sparse":
        return roam.Node(value_lengths=1, sparse_keys=True, optimizer=FTRL), {}
    return roam.Node(num_keys=1 << 20, value_lengths=1, optimizer=FTRL), {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", type=int, default=8803, help="ids per call (the wide table's per batch)")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    ids = np.arange(a.ids, dtype=np.uint64) * 7 + 3
    for run in range(a.runs):
        for space in ("dense", "sparse", "table"):
            node, kw = node_for(space)
            w = node.worker(0)
            shape = (a.ids, 1) if space == "table" else (a.ids,)
            out = np.zeros(shape, dtype=np.float32)
            grads = np.full(shape, 1e-3, dtype=np.float32)
            w.push_gradients(ids, grads, **kw).wait()
            start = time.perf_counter()
            for _ in range(a.calls):
                w.pull(ids, out, **kw).wait()
            mid = time.perf_counter()
            for _ in range(a.calls):
                w.push_gradients(ids, grads, **kw).wait()
            end = time.perf_counter()
            pull_us = (mid - start) / a.calls * 1e6
            push_us = (end - mid) / a.calls * 1e6
            print(f"run {run + 1} {space:6} pull {pull_us:6.0f} us  push_gradients {push_us:6.0f} us")
            node.close()  # one node: nothing to wait for (shutdown prints the counters)


if __name__ == "__main__":
    main()
