#!/usr/bin/env python3
"""Training throughput of roam.torch.EmbeddingBag against torch.nn.EmbeddingBag(sparse=True).

The same small click model in both (one bag of --bag Zipf-distributed ids per example, summed,
then a 2-layer MLP and a logistic loss), the same data, batches and torch threads; the plain
model steps its table with torch.optim.SGD on the sparse gradient, the roam model pushes the
same SGD update to roam in backward (one node, one worker, in this process). After an untimed
warm-up of both, runs alternate
between the two; prints one JSON line per run and a summary with the medians and ranges of
examples per second and their ratio. Needs PyTorch and the roam package.

    python scripts/torch-bench.py --runs 5 --threads 1
"""

import argparse
import json
import statistics
import time

import numpy as np
import torch

import roam
import roam.torch as rt


def make_data(args):
    rng = np.random.default_rng(args.seed)
    ids = (rng.zipf(1.1, size=(args.examples, args.bag)) - 1) % args.num_ids
    # Labels from a hidden score per id, so that the model has something to learn.
    score = rng.standard_normal(args.num_ids).astype(np.float32)
    labels = (score[ids].sum(1) > 0).astype(np.float32)
    return torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(labels)


def mlp(args):
    torch.manual_seed(args.seed)
    return torch.nn.Sequential(
        torch.nn.Linear(args.dim, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 1)
    )


def train(args, ids, labels, emb, params):
    head = mlp(args)
    opt = torch.optim.SGD([*params, *head.parameters()], lr=args.lr)
    start = time.perf_counter()
    total = 0.0
    for b in range(0, len(ids), args.batch):
        logits = head(emb(ids[b : b + args.batch])).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels[b : b + args.batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    seconds = time.perf_counter() - start
    return len(ids) / seconds, total / -(-len(ids) // args.batch)


def run_plain(args, ids, labels, init):
    emb = torch.nn.EmbeddingBag(args.num_ids, args.dim, mode="sum", sparse=True)
    with torch.no_grad():
        emb.weight.copy_(init)
    return train(args, ids, labels, emb, emb.parameters())


def run_roam(args, ids, labels, init):
    with roam.Node(num_keys=args.num_ids, value_lengths=args.dim) as node:
        emb = rt.EmbeddingBag(args.num_ids, args.dim, node, mode="sum", lr=args.lr)
        emb.load_(init)
        result = train(args, ids, labels, emb, [])
        node.worker(0).barrier()
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--num-ids", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--bag", type=int, default=8, help="ids per example")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--examples", type=int, default=200_000)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    ids, labels = make_data(args)
    init = torch.randn(args.num_ids, args.dim, generator=torch.Generator().manual_seed(args.seed)) * 0.1
    # Untimed warm-up of both: the first custom autograd Function of a process imports parts
    # of torch (~1 s), which would otherwise land in the first roam run.
    warm = argparse.Namespace(**{**vars(args), "examples": 4 * args.batch})
    for fn in (run_plain, run_roam):
        fn(warm, ids[: warm.examples], labels[: warm.examples], init)
    rates = {"plain": [], "roam": []}
    for run in range(args.runs):
        for name, fn in (("plain", run_plain), ("roam", run_roam)):
            rate, loss = fn(args, ids, labels, init)
            rates[name].append(rate)
            print(json.dumps({"run": run, "model": name, "examples_per_s": round(rate), "mean_loss": round(loss, 4)}), flush=True)
    ratios = [r / p for r, p in zip(rates["roam"], rates["plain"])]
    summary = {
        "threads": args.threads,
        "examples": args.examples,
        "batch": args.batch,
        "bag": args.bag,
        "dim": args.dim,
        "num_ids": args.num_ids,
        **{
            f"{name}_median": round(statistics.median(v))
            for name, v in rates.items()
        },
        **{f"{name}_range": [round(min(v)), round(max(v))] for name, v in rates.items()},
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
    }
    print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()
