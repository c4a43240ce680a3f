"""A CTR model in PyTorch whose embedding tables live in roam, and the same model in plain torch.

    python examples/ctr/train.py --data data/ml-100k-ctr --impl roam          # one node
    python examples/ctr/train.py --data data/ml-100k-ctr --impl torch         # the baseline
    roam launch --nodes 2 -- python examples/ctr/train.py --data data/ml-100k-ctr --impl roam

The model is the one `roam train ctr` trains in Rust: one embedding per id of every field, a
field's bag of ids mean-pooled, the fields' vectors concatenated into a 2-layer MLP
(`F·dim → hidden → 1`, ReLU), logistic loss averaged over the batch.

- `--impl roam`: the ids of all fields are one `roam.torch.EmbeddingBag` (field f's ids are
  offset by the cardinalities of the fields before it), its rows stepped by the node's
  server-side Adagrad (`roam.Node(optimizer=...)`, `lr=None` on the module); the MLP by
  `torch.optim.Adagrad`. Under `roam launch --nodes N` each process is a roam node and trains on
  every N-th training row; the MLP is wrapped in `DistributedDataParallel` over
  `torch.distributed` (gloo), which averages its gradients every step, so all processes keep
  the same MLP; the embedding rows are shared through roam.
- `--impl torch`: `torch.nn.EmbeddingBag(sparse=True)` stepped by `torch.optim.Adagrad` (sparse
  gradients) and the same MLP and optimizer, in one process.

Both start from the same parameters: embedding rows at zero (roam creates rows as zeros), the
MLP from `torch.manual_seed(--seed)`. Adagrad's eps: torch adds it after the square root, roam
under it; the roam node uses eps = 1e-20 so that both take the same first step of a row.

Data: a directory with `train.tsv` and `test.tsv` in the format of `scripts/fetch-data.sh
ml-100k-ctr` (header `label<TAB>field…`, cells of comma-separated integer ids) and optionally
`fields.tsv` (`name<TAB>cardinality`; otherwise the largest id + 1 of each field).

Output: a line per epoch on rank 0 and, at the end, one JSON line with `"app": "ctr-python"`:
per-epoch `loss` (mean training log-loss), `test_auc`, `test_logloss`, `seconds` and
`rows_per_second` (training rows of all processes / the epoch's wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent


# ---------------------------------------------------------------- data


class Split:
    """One split: labels, and every row's bags as flat ids with per-bag lengths (rows × fields)."""

    def __init__(self, labels: np.ndarray, ids: np.ndarray, lengths: np.ndarray):
        self.labels = labels.astype(np.float32)
        self.ids = ids.astype(np.int64)
        self.lengths = lengths.astype(np.int64)  # (rows, fields)
        row_len = self.lengths.sum(1)
        self.row_start = np.concatenate([[0], np.cumsum(row_len)])

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, rows: np.ndarray):
        """(ids, offsets, labels) tensors for `rows`: one bag per (row, field), row-major."""
        lengths = self.lengths[rows].reshape(-1)
        starts = self.row_start[rows]
        counts = self.row_start[rows + 1] - starts
        # Indices of every id of the chosen rows, in order, without a Python loop per row.
        first = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        index = first + np.arange(counts.sum())
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        return (
            torch.from_numpy(self.ids[index]),
            torch.from_numpy(offsets),
            torch.from_numpy(self.labels[rows]),
        )


def read_split(path: pathlib.Path, names: list[str] | None):
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        if header[0] != "label" or len(header) < 2:
            sys.exit(f"{path}: the header must be label<TAB>field...")
        if names is not None and header[1:] != names:
            sys.exit(f"{path}: fields {header[1:]} differ from {names}")
        labels, ids, lengths = [], [], []
        for n, line in enumerate(f, start=2):
            cells = line.rstrip("\n").split("\t")
            if len(cells) != len(header):
                sys.exit(f"{path} line {n}: {len(cells)} cells, the header has {len(header)}")
            labels.append(int(cells[0]))
            for field, cell in enumerate(cells[1:]):
                bag = [int(x) for x in cell.split(",") if x]
                ids.append((field, bag))
                lengths.append(len(bag))
    return header[1:], labels, ids, lengths


def load(data: pathlib.Path):
    names, tr_labels, tr_ids, tr_len = read_split(data / "train.tsv", None)
    _, te_labels, te_ids, te_len = read_split(data / "test.tsv", names)
    cards = [0] * len(names)
    fields_file = data / "fields.tsv"
    if fields_file.exists():
        for line in fields_file.read_text().splitlines():
            name, card = line.split("\t")
            cards[names.index(name)] = int(card)
    for field, bag in tr_ids + te_ids:
        for x in bag:
            cards[field] = max(cards[field], x + 1)
    offset = np.concatenate([[0], np.cumsum(cards)[:-1]])

    def split(labels, ids, lengths):
        flat = [offset[f] + x for f, bag in ids for x in bag]
        return Split(
            np.array(labels), np.array(flat, dtype=np.int64), np.array(lengths).reshape(len(labels), -1)
        )

    return names, int(sum(cards)), split(tr_labels, tr_ids, tr_len), split(te_labels, te_ids, te_len)


# ---------------------------------------------------------------- model and metrics


def mlp(fields: int, dim: int, hidden: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(fields * dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
    )


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve, ties counted one half (mean ranks)."""
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i : j + 1] = (i + j + 2) / 2.0
        i = j + 1
    pos = labels[order] == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def evaluate(bag, head, test: Split, fields: int, dim: int) -> tuple[float, float]:
    logits = []
    with torch.no_grad():
        for b in range(0, len(test), 4096):
            ids, offsets, _ = test.batch(np.arange(b, min(b + 4096, len(test))))
            x = bag(ids, offsets).reshape(-1, fields * dim)
            logits.append(head(x).squeeze(1))
    z = torch.cat(logits)
    y = torch.from_numpy(test.labels)
    logloss = F.binary_cross_entropy_with_logits(z, y).item()
    return auc(z.numpy(), test.labels), logloss


# ---------------------------------------------------------------- distributed set-up


def gloo_group(node, worker) -> None:
    """Joins torch.distributed (gloo) with the roam cluster's ranks. Under torchrun the
    environment already names the store; under `roam launch` rank 0 picks a free port on the
    coordinator's host and hands it to the others through a roam key."""
    import torch.distributed as dist

    if "MASTER_ADDR" not in os.environ:
        host = os.environ.get("ROAM_COORDINATOR", "127.0.0.1:0").rsplit(":", 1)[0]
        port = np.zeros(node.value_length, dtype=np.float32)
        key = np.array([PORT_KEY], dtype=np.uint64)
        if node.rank == 0:
            with socket.socket() as s:
                s.bind((host, 0))
                port[0] = s.getsockname()[1]
            worker.set(key, port).wait()
        worker.barrier()
        worker.pull(key, port).wait()
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = host, str(int(port[0]))
    dist.init_process_group("gloo", rank=node.rank, world_size=node.num_nodes)


PORT_KEY = 0  # set below: the key after the table's rows


# ---------------------------------------------------------------- training


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=pathlib.Path, required=True)
    ap.add_argument("--impl", choices=["roam", "torch"], default="roam")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--allocation", default="static-range", help="roam.Node(allocation=...)")
    ap.add_argument("--prefetch", action="store_true", help="localize the next batch's rows")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    names, rows, train, test = load(a.data)
    fields = len(names)
    torch.manual_seed(a.seed)
    head = mlp(fields, a.dim, a.hidden)

    node = worker = None
    if a.impl == "roam":
        import roam
        import roam.torch as rt

        global PORT_KEY
        PORT_KEY = rows
        node = roam.Node(
            num_keys=rows + 1,
            value_lengths=a.dim,
            allocation=a.allocation,
            optimizer={"kind": "adagrad", "lr": a.lr, "eps": 1e-20},
        )
        worker = node.worker(0)
        rank, world = node.rank, node.num_nodes
        bag = rt.EmbeddingBag(rows, a.dim, node, mode="mean", lr=None)
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel

            gloo_group(node, worker)
            head = DistributedDataParallel(head)  # broadcasts rank 0's initial MLP
        params = list(head.parameters())
    else:
        rank, world = 0, 1
        if int(os.environ.get("ROAM_NUM_NODES", "1")) > 1:
            sys.exit("--impl torch is the one-process baseline; run it without roam launch")
        bag = torch.nn.EmbeddingBag(rows, a.dim, mode="mean", sparse=True)
        torch.nn.init.zeros_(bag.weight)
        params = list(head.parameters())
        sparse_opt = torch.optim.Adagrad(bag.parameters(), lr=a.lr)
    dense_opt = torch.optim.Adagrad(params, lr=a.lr)

    # Every process the same number of steps (DDP needs it): equal shards of every world-th row.
    per = len(train) // world
    rng = np.random.default_rng(a.seed + 1000 * rank)
    shard = np.arange(rank, len(train), world)[:per]
    records = []
    for epoch in range(a.epochs):
        order = rng.permutation(shard)
        if worker is not None:
            worker.barrier()
        start = time.perf_counter()
        total = 0.0
        for b in range(0, per, a.batch):
            ids, offsets, y = train.batch(order[b : b + a.batch])
            if a.prefetch and b + a.batch < per:
                nxt, _, _ = train.batch(order[b + a.batch : b + 2 * a.batch])
                bag.prefetch(nxt)
            x = bag(ids, offsets).reshape(-1, fields * a.dim)
            loss = F.binary_cross_entropy_with_logits(head(x).squeeze(1), y)
            dense_opt.zero_grad()
            if a.impl == "torch":
                sparse_opt.zero_grad()
            loss.backward()  # roam: also steps the batch's rows where they live
            dense_opt.step()
            if a.impl == "torch":
                sparse_opt.step()
            total += loss.item() * len(y)
        if worker is not None:
            worker.barrier()  # every row's update applied before the evaluation
        seconds = time.perf_counter() - start
        if rank == 0:
            test_auc, test_logloss = evaluate(bag, head, test, fields, a.dim)
            rec = {
                "epoch": epoch + 1,
                "seconds": seconds,
                "loss": total / per,  # rank 0's rows (the processes' shards are alike)
                "test_auc": test_auc,
                "test_logloss": test_logloss,
                "rows_per_second": per * world / seconds,
            }
            records.append(rec)
            print(
                f"epoch {epoch + 1}/{a.epochs}  {seconds:.3f} s  loss {rec['loss']:.4f}  "
                f"test_auc {test_auc:.4f}  {rec['rows_per_second']:.0f} rows/s",
                flush=True,
            )
        if worker is not None:
            worker.barrier()
    if rank == 0:
        summary = {
            "app": "ctr-python",
            "impl": a.impl,
            "nodes": world,
            "threads": a.threads,
            "dataset": str(a.data),
            "settings": {k: v for k, v in vars(a).items() if k != "data"},
            "epochs": records,
        }
        print(json.dumps(summary), flush=True)
    if node is not None:
        if world > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
        node.shutdown()


if __name__ == "__main__":
    main()
