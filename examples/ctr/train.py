"""A CTR model in PyTorch whose embedding tables live in roam, and the same model in plain torch.

    python examples/ctr/train.py --data data/ml-100k-ctr --impl roam          # one node
    python examples/ctr/train.py --data data/ml-100k-ctr --impl torch         # the baseline
    roam launch --nodes 2 -- python examples/ctr/train.py --data data/ml-100k-ctr --impl roam
    python examples/ctr/train.py --data data/ml-100k-ctr --impl roam --model wide-deep

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

`--model wide-deep` (Wide&Deep): logit = wide(x) + deep(x), deep(x) the model above (`--model
deep`, the default) and wide(x) a linear model: the sum of one scalar weight per wide id of the
row (a dim-1 `EmbeddingBag(mode="sum")`). A row's wide ids are its ids of every field (the deep
table's ids, one-hot) and its crosses: for each pair of fields of `--crosses` (`all-pairs`,
default; `none`; or `user*item,item*genres`) one id per pair of an id of the first field and an
id of the second (a bag field crosses each of its ids), hashed (splitmix64 chained over the
field pair and the two ids, `cross_hash`) into `--wide-buckets` ids after the one-hot ones. The
wide weights are trained by FTRL-Proximal (`--ftrl-alpha/-beta/-l1/-l2`): with `--impl roam` the
node's server-side FTRL on the named table "wide" (the deep rows are table "deep" with the
Adagrad above, and table "port" hands over the gloo port); with `--impl torch` by `FTRL` below,
roam's formulas on torch's sparse gradient. Wide weights start at zero in both.

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


# ---------------------------------------------------------------- wide features (--model wide-deep)

CROSS_SEED = np.uint64(0x5EED_C0DE_0017_0017)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 of every element of a uint64 array (wrapping arithmetic: the same everywhere)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def cross_hash(a: int, b: int, id_a: np.ndarray, id_b: np.ndarray, buckets: int) -> np.ndarray:
    """The bucket of each cross (field a's id id_a, field b's id id_b): splitmix64 chained over
    (seed ^ (a << 8 | b), id_a, id_b), modulo `buckets`."""
    h = splitmix64(np.array([a << 8 | b], dtype=np.uint64) ^ CROSS_SEED)
    h = splitmix64(h ^ id_a.astype(np.uint64))
    h = splitmix64(h ^ id_b.astype(np.uint64))
    return (h % np.uint64(buckets)).astype(np.int64)


def parse_crosses(spec: str, names: list[str]) -> list[tuple[int, int]]:
    """`all-pairs` (every pair of fields), `none`, or `user*item,item*genres` (field names)."""
    if spec == "all-pairs":
        return [(a, b) for a in range(len(names)) for b in range(a + 1, len(names))]
    if spec == "none":
        return []
    out = []
    for pair in spec.split(","):
        parts = pair.split("*")
        if len(parts) != 2 or any(p not in names for p in parts) or parts[0] == parts[1]:
            sys.exit(f"--crosses: {pair!r} is not two distinct fields of {names} joined by '*'")
        out.append((names.index(parts[0]), names.index(parts[1])))
    return out


def wide_split(split: Split, crosses: list[tuple[int, int]], rows: int, buckets: int) -> Split:
    """Every row's wide ids as one bag: its ids of every field (the deep table's ids, one-hot),
    then for each cross (a, b) one id per pair of an id of field a and an id of field b (a bag
    field crosses each of its ids), hashed into the `buckets` ids from `rows` on."""
    n = len(split)
    lengths = split.lengths
    starts = split.row_start[:-1, None] + np.cumsum(lengths, 1) - lengths  # (rows, fields)
    row_parts = [np.repeat(np.arange(n), lengths.sum(1))]
    id_parts = [split.ids]
    for a, b in crosses:
        count = lengths[:, a] * lengths[:, b]
        row = np.repeat(np.arange(n), count)
        k = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
        lb = lengths[row, b]
        id_a = split.ids[starts[row, a] + k // lb]
        id_b = split.ids[starts[row, b] + k % lb]
        row_parts.append(row)
        id_parts.append(rows + cross_hash(a, b, id_a, id_b, buckets))
    row = np.concatenate(row_parts)
    order = np.argsort(row, kind="stable")  # per row: its one-hot ids, then cross by cross
    ids = np.concatenate(id_parts)[order]
    return Split(split.labels, ids, np.bincount(row, minlength=n)[:, None])


FTRL_DEFAULTS = {"alpha": 0.5, "beta": 1.0, "l1": 0.0, "l2": 0.0}  # measured: README


class FTRL(torch.optim.Optimizer):
    """FTRL-Proximal for sparse (or dense) gradients: roam's server-side rule, per coordinate
    (docs/embeddings.md): σ = (sqrt(n+g²) − sqrt(n))/α; z += g − σ·w; n += g²;
    w = 0 if |z| ≤ l1 else −(z − sign(z)·l1) / ((β + sqrt(n))/α + l2). A sparse gradient is
    coalesced (a row's gradients in one step are summed, as roam.torch pushes them), then each
    touched row's (w, z, n) is gathered, stepped in float32 in roam's order, and scattered."""

    def __init__(self, params, alpha: float, beta: float = 1.0, l1: float = 0.0, l2: float = 0.0):
        super().__init__(params, dict(alpha=alpha, beta=beta, l1=l1, l2=l2))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            alpha, beta, l1, l2 = (group[k] for k in ("alpha", "beta", "l1", "l2"))
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["z"], state["n"] = torch.zeros_like(p), torch.zeros_like(p)
                grad = p.grad.coalesce() if p.grad.is_sparse else p.grad.to_sparse(1)
                idx, g = grad.indices()[0], grad.values()
                w, z, n = p[idx], state["z"][idx], state["n"][idx]
                n_new = n + g * g
                sigma = (n_new.sqrt() - n.sqrt()) / alpha
                z = z + (g - sigma * w)
                w = -(z - z.sign() * l1) / ((beta + n_new.sqrt()) / alpha + l2)
                w = torch.where(z.abs() <= l1, torch.zeros_like(w), w)
                p.index_copy_(0, idx, w)
                state["z"].index_copy_(0, idx, z)
                state["n"].index_copy_(0, idx, n_new)


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


class Model:
    """logit = deep(x) [+ wide(x)]: deep the MLP over the concatenated field bags, wide the sum
    of the row's wide weights (dim-1 `EmbeddingBag(mode="sum")` over `wide_split`'s ids)."""

    def __init__(self, bag, head, fields: int, dim: int, wide=None):
        self.bag, self.head, self.fields, self.dim, self.wide = bag, head, fields, dim, wide

    def logits(self, data: Split, wide_data: Split | None, rows: np.ndarray):
        ids, offsets, y = data.batch(rows)
        z = self.head(self.bag(ids, offsets).reshape(-1, self.fields * self.dim)).squeeze(1)
        if self.wide is not None:
            wide_ids, wide_offsets, _ = wide_data.batch(rows)
            z = z + self.wide(wide_ids, wide_offsets).squeeze(1)
        return z, y

    def prefetch(self, data: Split, wide_data: Split | None, rows: np.ndarray) -> None:
        self.bag.prefetch(data.batch(rows)[0])
        if self.wide is not None:
            self.wide.prefetch(wide_data.batch(rows)[0])


def evaluate(model: Model, test: Split, wide_test: Split | None) -> tuple[float, float]:
    logits = []
    with torch.no_grad():
        for b in range(0, len(test), 4096):
            logits.append(model.logits(test, wide_test, np.arange(b, min(b + 4096, len(test))))[0])
    z = torch.cat(logits)
    y = torch.from_numpy(test.labels)
    logloss = F.binary_cross_entropy_with_logits(z, y).item()
    return auc(z.numpy(), test.labels), logloss


# ---------------------------------------------------------------- distributed set-up


def gloo_group(node, worker, table: str | None = None) -> None:
    """Joins torch.distributed (gloo) with the roam cluster's ranks. Under torchrun the
    environment already names the store; under `roam launch` rank 0 picks a free port on the
    coordinator's host and hands it to the others through a roam key (`PORT_KEY`, or with
    named tables id 0 of `table`)."""
    import torch.distributed as dist

    if "MASTER_ADDR" not in os.environ:
        host = os.environ.get("ROAM_COORDINATOR", "127.0.0.1:0").rsplit(":", 1)[0]
        port = np.zeros(1 if table else node.value_length, dtype=np.float32)
        key = np.array([0 if table else PORT_KEY], dtype=np.uint64)
        if node.rank == 0:
            with socket.socket() as s:
                s.bind((host, 0))
                port[0] = s.getsockname()[1]
            worker.set(key, port, table=table).wait()
        worker.barrier()
        worker.pull(key, port, table=table).wait()
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = host, str(int(port[0]))
    dist.init_process_group("gloo", rank=node.rank, world_size=node.num_nodes)


PORT_KEY = 0  # set below: the key after the table's rows (--model deep)


# ---------------------------------------------------------------- training


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=pathlib.Path, required=True)
    ap.add_argument("--impl", choices=["roam", "torch"], default="roam")
    ap.add_argument("--model", choices=["deep", "wide-deep"], default="deep")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument(
        "--allocation", default=None,
        help="roam.Node(allocation=...); default static-range (deep), static-hash (wide-deep)",
    )
    ap.add_argument("--prefetch", action="store_true", help="localize the next batch's rows")
    ap.add_argument("--crosses", default="all-pairs", help="wide crosses: all-pairs, none, a*b,c*d")
    ap.add_argument("--wide-buckets", type=int, default=2**20, help="hash buckets of the crosses")
    ap.add_argument("--ftrl-alpha", type=float, default=FTRL_DEFAULTS["alpha"])
    ap.add_argument("--ftrl-beta", type=float, default=FTRL_DEFAULTS["beta"])
    ap.add_argument("--ftrl-l1", type=float, default=FTRL_DEFAULTS["l1"])
    ap.add_argument("--ftrl-l2", type=float, default=FTRL_DEFAULTS["l2"])
    a = ap.parse_args()
    wide_deep = a.model == "wide-deep"
    if a.allocation is None:
        a.allocation = "static-hash" if wide_deep else "static-range"
    torch.set_num_threads(a.threads)

    names, rows, train, test = load(a.data)
    fields = len(names)
    wide_rows = wide_train = wide_test = None
    if wide_deep:
        crosses = parse_crosses(a.crosses, names)
        wide_rows = rows + a.wide_buckets
        wide_train = wide_split(train, crosses, rows, a.wide_buckets)
        wide_test = wide_split(test, crosses, rows, a.wide_buckets)
    ftrl = {"alpha": a.ftrl_alpha, "beta": a.ftrl_beta, "l1": a.ftrl_l1, "l2": a.ftrl_l2}
    torch.manual_seed(a.seed)
    head = mlp(fields, a.dim, a.hidden)

    node = worker = wide = None
    if a.impl == "roam":
        import roam
        import roam.torch as rt

        adagrad = {"kind": "adagrad", "lr": a.lr, "eps": 1e-20}
        if wide_deep:
            tables = {
                "deep": {"dim": a.dim, "num_ids": rows, "optimizer": adagrad},
                "wide": {"dim": 1, "num_ids": wide_rows, "optimizer": {"kind": "ftrl", **ftrl}},
                "port": {"dim": 1, "num_ids": 1},  # the gloo port's hand-over, no optimizer
            }
            node = roam.Node(tables=tables, allocation=a.allocation)
            bag = rt.EmbeddingBag(rows, a.dim, node, mode="mean", lr=None, table="deep")
            wide = rt.EmbeddingBag(wide_rows, 1, node, mode="sum", lr=None, table="wide")
        else:
            global PORT_KEY
            PORT_KEY = rows
            node = roam.Node(
                num_keys=rows + 1, value_lengths=a.dim, allocation=a.allocation, optimizer=adagrad
            )
            bag = rt.EmbeddingBag(rows, a.dim, node, mode="mean", lr=None)
        worker = node.worker(0)
        rank, world = node.rank, node.num_nodes
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel

            gloo_group(node, worker, "port" if wide_deep else None)
            head = DistributedDataParallel(head)  # broadcasts rank 0's initial MLP
        sparse_opts = []
    else:
        rank, world = 0, 1
        if int(os.environ.get("ROAM_NUM_NODES", "1")) > 1:
            sys.exit("--impl torch is the one-process baseline; run it without roam launch")
        bag = torch.nn.EmbeddingBag(rows, a.dim, mode="mean", sparse=True)
        torch.nn.init.zeros_(bag.weight)
        sparse_opts = [torch.optim.Adagrad(bag.parameters(), lr=a.lr)]
        if wide_deep:
            wide = torch.nn.EmbeddingBag(wide_rows, 1, mode="sum", sparse=True)
            torch.nn.init.zeros_(wide.weight)
            sparse_opts.append(FTRL(wide.parameters(), **ftrl))
    dense_opt = torch.optim.Adagrad(list(head.parameters()), lr=a.lr)
    model = Model(bag, head, fields, a.dim, wide)

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
            batch = order[b : b + a.batch]
            if a.prefetch and b + a.batch < per:
                model.prefetch(train, wide_train, order[b + a.batch : b + 2 * a.batch])
            z, y = model.logits(train, wide_train, batch)
            loss = F.binary_cross_entropy_with_logits(z, y)
            dense_opt.zero_grad()
            for opt in sparse_opts:
                opt.zero_grad()
            loss.backward()  # roam: also steps the batch's rows where they live
            dense_opt.step()
            for opt in sparse_opts:
                opt.step()
            total += loss.item() * len(y)
        if worker is not None:
            worker.barrier()  # every row's update applied before the evaluation
        seconds = time.perf_counter() - start
        if rank == 0:
            test_auc, test_logloss = evaluate(model, test, wide_test)
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
            "model": a.model,
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
