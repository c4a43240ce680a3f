#!/usr/bin/env python3
"""Knowledge-graph embeddings (ComplEx) trained from Python with roam as the embedding store.

The same method as the Rust app (`roam train kge`, crates/roam-apps/src/kge): ComplEx scores,
logistic loss on each positive triple and N corrupted tails and N corrupted heads, L2
regularisation per use of a key, AdaGrad with the accumulator stored next to the embedding in
the same roam key (so one pull brings everything an update needs, and one additive push of
`[-eta*g/sqrt(acc+g^2+eps), g^2]` applies the step wherever the key lives), filtered MRR and
Hits@k. Triples are split over the workers by relation; under dynamic allocation each worker
localizes its relations once and the entities of its next batch ahead of time, so most
accesses are local memory copies.

PyTorch is used for the gradients if it is installed (autograd; pulled straight into torch
tensors through `__dlpack__`), NumPy otherwise (hand-written gradients); `--backend` chooses.

Run:
    python examples/python/kge.py                          # one node, 2 worker threads
    roam launch --nodes 2 --workers-per-node 2 -- python examples/python/kge.py
    python examples/python/kge.py --data path/to/kge --dim 50 --epochs 12

Data: a directory with train/valid/test as `.del` (tab-separated integer ids, lapse-toy, LibKGE)
or `.txt` (tab-separated names; `scripts/fetch-data.sh umls`). Default: lapse-toy/kge from the
shared data next to the repository if present, else `data/umls`, else a synthetic graph.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import sys
import threading
import time

import numpy as np

import roam

REPO = pathlib.Path(__file__).resolve().parents[2]
ADAGRAD_EPS = 1e-6


# ---------------------------------------------------------------- data


class Graph:
    """Triples as int arrays (s, r, o) with entity ids 0..ne and relation ids 0..nr."""

    def __init__(self, train, valid, test, ne, nr, name):
        self.train, self.valid, self.test = train, valid, test
        self.ne, self.nr, self.name = ne, nr, name


def load_graph(directory: pathlib.Path) -> Graph:
    files = {}
    for split in ("train", "valid", "test"):
        for ext in (".del", ".txt", ".tsv"):
            if (directory / f"{split}{ext}").is_file():
                files[split] = directory / f"{split}{ext}"
                break
        else:
            raise SystemExit(f"{directory}: no {split}.del / .txt / .tsv")
    rows = {
        split: [line.rstrip("\n").split("\t") for line in open(path) if line.strip()]
        for split, path in files.items()
    }
    if all(path.suffix == ".del" for path in files.values()):
        arrays = {s: np.array(r, dtype=np.int64).reshape(-1, 3) for s, r in rows.items()}
        ne = 1 + max(int(max(a[:, 0].max(), a[:, 2].max())) for a in arrays.values())
        nr = 1 + max(int(a[:, 1].max()) for a in arrays.values())
    else:  # names: ids in order of first appearance
        ents, rels = {}, {}
        arrays = {}
        for split in ("train", "valid", "test"):
            arrays[split] = np.array(
                [
                    (ents.setdefault(h, len(ents)), rels.setdefault(r, len(rels)),
                     ents.setdefault(t, len(ents)))
                    for h, r, t in rows[split]
                ],
                dtype=np.int64,
            ).reshape(-1, 3)
        ne, nr = len(ents), len(rels)
    return Graph(arrays["train"], arrays["valid"], arrays["test"], ne, nr, str(directory))


def synthetic_graph(seed=1, ne=300, nr=20, clusters=10, per_relation=250) -> Graph:
    """Entities in clusters; relation r links cluster a_r to cluster b_r."""
    rng = np.random.default_rng(seed)
    cluster = rng.integers(0, clusters, ne)
    members = [np.flatnonzero(cluster == c) for c in range(clusters)]
    triples = set()
    for r in range(nr):
        a, b = rng.integers(0, clusters, 2)
        for _ in range(per_relation):
            triples.add((int(rng.choice(members[a])), r, int(rng.choice(members[b]))))
    allt = np.array(sorted(triples), dtype=np.int64)
    allt = allt[rng.permutation(len(allt))]
    n_eval = len(allt) // 20
    return Graph(allt[2 * n_eval:], allt[:n_eval], allt[n_eval:2 * n_eval], ne, nr, "synthetic")


def default_data() -> pathlib.Path | None:
    candidates = [
        os.environ.get("ROAM_KGE_DATA"),
        REPO.parent / "shared" / "data" / "lapse-toy" / "kge",
        REPO / "data" / "umls",
    ]
    for candidate in filter(None, candidates):
        path = pathlib.Path(candidate)
        if (path / "train.del").exists() or (path / "train.txt").exists():
            return path
    return None


# ---------------------------------------------------------------- ComplEx


def tail_query(a, r, d):
    """M_r^T a: score(a, r, b) = tail_query(a, r) . b  (last axis: [re(d), im(d)])."""
    ar, ai, rr, ri = a[..., :d], a[..., d:], r[..., :d], r[..., d:]
    return cat([rr * ar - ri * ai, rr * ai + ri * ar])


def head_query(r, b, d):
    """M_r b: score(a, r, b) = a . head_query(r, b)."""
    br, bi, rr, ri = b[..., :d], b[..., d:], r[..., :d], r[..., d:]
    return cat([rr * br + ri * bi, rr * bi - ri * br])


def relation_grad(a, b, d):
    """d(a^T M_r b)/dr."""
    ar, ai, br, bi = a[..., :d], a[..., d:], b[..., :d], b[..., d:]
    return cat([ar * br + ai * bi, ar * bi - ai * br])


def cat(parts):
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts, axis=-1)
    import torch

    return torch.cat(parts, dim=-1)


def sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


def softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


class Batch:
    """The keys of a batch of positives with their negatives, as rows of the pulled array."""

    def __init__(self, triples, neg_t, neg_h, ne):
        s, r, o = triples[:, 0], triples[:, 1], triples[:, 2]
        b, n = neg_t.shape
        raw = np.concatenate([s, o, neg_t.ravel(), neg_h.ravel(), ne + r]).astype(np.uint64)
        self.keys, inv = np.unique(raw, return_inverse=True)
        self.s, self.o = inv[:b], inv[b:2 * b]
        self.t = inv[2 * b:2 * b + b * n].reshape(b, n)
        self.h = inv[2 * b + b * n:2 * b + 2 * b * n].reshape(b, n)
        self.r = inv[2 * b + 2 * b * n:]
        # Uses of each row among the scored triples (L2 is applied once per use, as in Rust):
        # s and o in N + 1 triples each, r in 2N + 1, each negative in one.
        self.uses = np.bincount(
            np.concatenate([np.repeat(self.s, n + 1), np.repeat(self.o, n + 1),
                            np.repeat(self.r, 2 * n + 1), self.t.ravel(), self.h.ravel()]),
            minlength=len(self.keys),
        ).astype(np.float32)
        self.scored = b * (1 + 2 * n)


def grads_numpy(emb, batch: Batch, d, gamma):
    """Summed gradients of the batch's loss per pulled row, and the loss (NumPy)."""
    S, O, R = emb[batch.s], emb[batch.o], emb[batch.r]
    T, H = emb[batch.t], emb[batch.h]  # (B, N, 2d)
    q, p = tail_query(S, R, d), head_query(R, O, d)
    f_pos = np.einsum("bk,bk->b", q, O)
    f_t = np.einsum("bk,bnk->bn", q, T)
    f_h = np.einsum("bnk,bk->bn", H, p)
    loss = softplus(f_pos).sum() - f_pos.sum() + softplus(f_t).sum() + softplus(f_h).sum()
    dl_pos, dl_t, dl_h = sigmoid(f_pos) - 1, sigmoid(f_t), sigmoid(f_h)
    u = dl_pos[:, None] * O + np.einsum("bn,bnk->bk", dl_t, T)  # sum of dl * tail over (s, r, .)
    v = np.einsum("bn,bnk->bk", dl_h, H)  # sum of dl * head over corrupted (., r, o)
    w = dl_pos[:, None] * S + v
    rows = np.concatenate([batch.s, batch.o, batch.r, batch.t.ravel(), batch.h.ravel()])
    contributions = np.concatenate([
        head_query(R, u, d),
        tail_query(w, R, d),
        relation_grad(S, u, d) + relation_grad(v, O, d),
        (dl_t[..., None] * q[:, None, :]).reshape(-1, emb.shape[1]),
        (dl_h[..., None] * p[:, None, :]).reshape(-1, emb.shape[1]),
    ])
    # Sum the contributions per pulled row: a one-hot matrix product (faster than np.add.at).
    onehot = (rows[None, :] == np.arange(len(emb))[:, None]).astype(emb.dtype)
    G = onehot @ contributions
    G += (gamma / emb.shape[1]) * batch.uses[:, None] * emb
    return G, float(loss)


def grads_torch(emb_np, batch: Batch, d, gamma):
    """The same with PyTorch autograd; `emb_np` is a NumPy view of a torch tensor's memory."""
    import torch
    import torch.nn.functional as F

    emb = torch.from_numpy(emb_np).requires_grad_(True)  # zero-copy
    idx = {k: torch.from_numpy(np.ascontiguousarray(getattr(batch, k)).astype(np.int64))
           for k in ("s", "o", "r", "t", "h")}
    S, O, R = emb[idx["s"]], emb[idx["o"]], emb[idx["r"]]
    T, H = emb[idx["t"]], emb[idx["h"]]
    q, p = tail_query(S, R, d), head_query(R, O, d)
    f_pos = (q * O).sum(-1)
    f_t = torch.einsum("bk,bnk->bn", q, T)
    f_h = torch.einsum("bnk,bk->bn", H, p)
    loss = F.softplus(-f_pos).sum() + F.softplus(f_t).sum() + F.softplus(f_h).sum()
    uses = torch.from_numpy(batch.uses)
    reg = 0.5 * (gamma / emb.shape[1]) * (uses[:, None] * emb * emb).sum()
    (loss + reg).backward()
    return emb.grad.numpy(), float(loss.detach())


# ---------------------------------------------------------------- evaluation


def evaluate(ent, rel, triples, known, d):
    """Filtered MRR and Hits@1/3/10, both directions; ties count half (as in Rust)."""
    tails, heads = collections.defaultdict(set), collections.defaultdict(set)
    for s, r, o in known:
        tails[(s, r)].add(o)
        heads[(o, r)].add(s)
    s, r, o = triples[:, 0], triples[:, 1], triples[:, 2]
    by_tail = tail_query(ent[s], rel[r], d) @ ent.T  # (T, ne)
    by_head = head_query(rel[r], ent[o], d) @ ent.T
    ranks = []
    for scores, targets, filters in (
        (by_tail, o, [tails[(a, b)] for a, b in zip(s.tolist(), r.tolist())]),
        (by_head, s, [heads[(a, b)] for a, b in zip(o.tolist(), r.tolist())]),
    ):
        for row, target, filt in zip(scores, targets, filters):
            keep = np.ones(len(row), bool)
            keep[list(filt)] = False
            keep[target] = False
            truth = row[target]
            if not np.isfinite(truth):
                ranks.append(float(len(row)))
                continue
            better = np.count_nonzero(row[keep] > truth)
            tied = np.count_nonzero(row[keep] == truth)
            ranks.append(1 + better + tied / 2)
    ranks = np.array(ranks)
    return {
        "mrr": float(np.mean(1 / ranks)),
        "hits_at_1": float(np.mean(ranks <= 1)),
        "hits_at_3": float(np.mean(ranks <= 3)),
        "hits_at_10": float(np.mean(ranks <= 10)),
    }


# ---------------------------------------------------------------- training


def run_worker(node, index, graph, args, backend, report):
    w = node.worker(index)
    d, n, ne, nr = args.dim, args.neg_ratio, graph.ne, graph.nr
    num_workers = node.num_nodes * node.workers_per_node
    g = w.global_id
    vlen = 4 * d  # [re, im, acc_re, acc_im]
    model_keys = ne + nr
    loss_key = lambda epoch: model_keys + epoch  # cluster-wide [loss, scored] per epoch

    # Initial values: every worker sets its share, each key from its own seed.
    mine = np.arange(g, model_keys, num_workers, dtype=np.uint64)
    init = np.zeros((len(mine), vlen), np.float32)
    for i, k in enumerate(mine.tolist()):
        init[i, :2 * d] = np.random.default_rng([args.seed, k]).uniform(
            -args.init_range, args.init_range, 2 * d)
    w.set(mine, init).wait()
    w.barrier()

    # This worker's triples: the train set ordered by relation, one contiguous share each,
    # so that a worker's relations are mostly its own.
    ordered = graph.train[np.argsort(graph.train[:, 1], kind="stable")]
    share = np.array_split(ordered, num_workers)[g]
    dynamic = node.allocation == "dynamic"
    if dynamic:
        w.localize(np.unique(ne + share[:, 1]).astype(np.uint64)).wait()

    rng = np.random.default_rng([args.seed, g])
    pending = collections.deque()  # push and localize tickets in flight
    t_start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        t_epoch = time.perf_counter()
        order = rng.permutation(len(share))
        neg_t = rng.integers(0, ne, (len(share), n))
        neg_h = rng.integers(0, ne, (len(share), n))
        starts = range(0, len(share), args.batch)
        batches = [order[i:i + args.batch] for i in starts]
        make = lambda sel: Batch(share[sel], neg_t[sel], neg_h[sel], ne)
        ahead = collections.deque(make(b) for b in batches[:args.localize_ahead + 1])
        if dynamic:
            for later in list(ahead)[1:]:
                pending.append(w.localize(later.keys))
        loss_sum, scored = 0.0, 0
        for bi in range(len(batches)):
            batch = ahead.popleft()  # `ahead` now holds batches bi+1 .. bi+len(ahead)
            if bi + len(ahead) + 1 < len(batches):
                later = make(batches[bi + len(ahead) + 1])
                ahead.append(later)
                if dynamic:
                    # Look ahead: the keys of a later batch start moving here now, so that they
                    # are local (plain memory copies) when that batch is pulled.
                    pending.append(w.localize(later.keys))
            if backend == "torch":
                import torch

                vals_t = torch.empty((len(batch.keys), vlen))
                w.pull(batch.keys, vals_t).wait()  # straight into the tensor (__dlpack__)
                vals = vals_t.numpy()  # a view, no copy
            else:
                vals = w.pull(batch.keys).wait()
            emb, acc = vals[:, :2 * d], vals[:, 2 * d:]
            if backend == "torch":
                G, loss = grads_torch(np.ascontiguousarray(emb), batch, d, args.gamma)
            else:
                G, loss = grads_numpy(emb, batch, d, args.gamma)
            g2 = G * G
            delta = np.empty_like(vals)
            delta[:, :2 * d] = -args.eta * G / np.sqrt(acc + g2 + ADAGRAD_EPS)
            delta[:, 2 * d:] = g2
            pending.append(w.push(batch.keys, delta))  # not waited: issue order is kept
            while len(pending) > 64:
                pending.popleft().wait()
            loss_sum += loss
            scored += batch.scored
        while pending:
            pending.popleft().wait()
        stat = np.zeros(vlen, np.float32)
        stat[:2] = (loss_sum, scored)
        w.push([loss_key(epoch)], stat).wait()
        w.barrier()
        if g == 0:
            total = w.pull([loss_key(epoch)]).wait()[0]
            line = {"epoch": epoch, "loss": float(total[0] / total[1]),
                    "seconds": round(time.perf_counter() - t_epoch, 3)}
            if epoch == args.epochs or (args.eval_every and epoch % args.eval_every == 0):
                all_vals = w.pull(np.arange(model_keys, dtype=np.uint64)).wait()
                ent, rel = all_vals[:ne, :2 * d], all_vals[ne:, :2 * d]
                known = np.concatenate([graph.train, graph.valid, graph.test]).tolist()
                line.update(evaluate(ent, rel, graph.test, known, d))
            print(json.dumps(line), flush=True)
            report.append(line)
        w.barrier()
    report_time = time.perf_counter() - t_start
    if g == 0:
        report.append({"train_seconds": round(report_time, 3)})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=pathlib.Path, help="directory with train/valid/test")
    ap.add_argument("--synthetic", action="store_true", help="use the built-in synthetic graph")
    ap.add_argument("--dim", type=int, default=50, help="complex components (2*dim reals)")
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--eta", type=float, default=0.1, help="AdaGrad learning rate")
    ap.add_argument("--gamma", type=float, default=0.1, help="L2 weight (per use, / 2*dim)")
    ap.add_argument("--neg-ratio", type=int, default=6, help="corrupted tails and heads each")
    ap.add_argument("--batch", type=int, default=4, help="positives per pull/push step")
    ap.add_argument("--init-range", type=float, default=1e-2)
    ap.add_argument("--localize-ahead", type=int, default=1,
                    help="batches whose keys are localized ahead (dynamic allocation)")
    ap.add_argument("--eval-every", type=int, default=0, help="also evaluate every N epochs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=None,
                    help="worker threads per node (default: ROAM_WORKERS_PER_NODE, else 2)")
    ap.add_argument("--allocation", default="dynamic",
                    choices=["dynamic", "static-range", "static-hash"])
    ap.add_argument("--backend", default="auto", choices=["auto", "numpy", "torch"])
    args = ap.parse_args(argv)

    backend = args.backend
    if backend == "auto":
        try:
            import torch  # noqa: F401

            backend = "torch"
        except ImportError:
            backend = "numpy"
    data = None if args.synthetic else (args.data or default_data())
    graph = load_graph(data) if data else synthetic_graph(args.seed)
    workers = args.workers or int(os.environ.get("ROAM_WORKERS_PER_NODE") or 2)
    vlen = 4 * args.dim
    num_keys = graph.ne + graph.nr + args.epochs + 1

    with roam.Node(num_keys=num_keys, value_lengths=vlen, workers=workers,
                   allocation=args.allocation) as node:
        if node.rank == 0:
            print(f"kge: {graph.name}: {graph.ne} entities, {graph.nr} relations, "
                  f"{len(graph.train)} train / {len(graph.test)} test triples; "
                  f"{node.num_nodes} nodes x {node.workers_per_node} workers, "
                  f"{node.allocation}, backend {backend}", flush=True)
        report = []
        errors = []

        def body(i):
            try:
                run_worker(node, i, graph, args, backend, report)
            except BaseException as e:  # a failed worker ends the process: peers would hang
                errors.append(e)
                import traceback

                traceback.print_exc()
                sys.stderr.flush()
                os._exit(1)

        threads = [threading.Thread(target=body, args=(i,)) for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = node.stats()
    if node.rank == 0:
        final = next(r for r in reversed(report) if "mrr" in r)
        summary = {
            "app": "kge-python", "backend": backend, "data": graph.name,
            "nodes": node.num_nodes, "workers_per_node": node.workers_per_node,
            "allocation": node.allocation, "dim": args.dim, "epochs": args.epochs,
            "batch": args.batch,
            **{k: final[k] for k in ("mrr", "hits_at_1", "hits_at_3", "hits_at_10")},
            "train_seconds": report[-1].get("train_seconds"),
            "local_fraction": round(stats["local_fraction"], 4),
        }
        print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
