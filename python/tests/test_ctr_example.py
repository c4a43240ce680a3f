"""The CTR example (examples/ctr/train.py) at a tiny size: roam's module and the plain torch
baseline reach the same test AUC in one process, and the roam model trains under `roam launch
--nodes 2` (DDP over gloo for the MLP); the same for the Wide&Deep variant (`--model
wide-deep`, FTRL on the wide part), whose torch FTRL takes exactly roam's FTRL steps and whose
wide ids are the one-hot ids then the hashed crosses. Skipped without torch. The data is
generated here (a planted logistic model over 4 fields, one of them a bag), so the test needs
no download."""

import importlib.util
import json
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO

torch = pytest.importorskip("torch")

EXAMPLE = REPO / "examples" / "ctr" / "train.py"
ARGS = ["--epochs", "2", "--dim", "8", "--hidden", "16", "--batch", "64", "--lr", "0.05"]
WIDE = ["--model", "wide-deep", "--wide-buckets", "4096"]


def write_data(root: pathlib.Path, seed: int = 7) -> pathlib.Path:
    """3,000 rows: user (200 ids), item (100), gender (2), tags (a bag of 0-3 of 10); a click's
    probability is the logistic of the sum of the ids' hidden weights."""
    print(f"data seed {seed}")
    rng = random.Random(seed)
    cards = {"user": 200, "item": 100, "gender": 2, "tags": 10}
    weight = {(f, i): rng.gauss(0, 1) for f, n in cards.items() for i in range(n)}
    lines = []
    for _ in range(3000):
        user, item, gender = rng.randrange(200), rng.randrange(100), rng.randrange(2)
        tags = rng.sample(range(10), rng.randrange(4))
        z = weight["user", user] + weight["item", item] + weight["gender", gender]
        z += sum(weight["tags", t] for t in tags)
        label = int(rng.random() < 1 / (1 + pow(2.718281828, -z)))
        lines.append(f"{label}\t{user}\t{item}\t{gender}\t{','.join(map(str, tags))}\n")
    header = "label\tuser\titem\tgender\ttags\n"
    data = root / "ctr"
    data.mkdir()
    (data / "train.tsv").write_text(header + "".join(lines[:2400]))
    (data / "test.tsv").write_text(header + "".join(lines[2400:]))
    (data / "fields.tsv").write_text("".join(f"{k}\t{v}\n" for k, v in cards.items()))
    return data


def summary(output: str) -> dict:
    lines = [l for l in output.splitlines() if '"app": "ctr-python"' in l]
    assert lines, output
    line = lines[-1]
    return json.loads(line.split("] ", 1)[1] if line.startswith("[node") else line)


def run(cmd: list[str]) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{out}"
    return summary(out)


def test_roam_module_matches_plain_torch_in_one_process(tmp_path, monkeypatch):
    data = write_data(tmp_path)
    base = [sys.executable, str(EXAMPLE), "--data", str(data), *ARGS]
    plain = run(base + ["--impl", "torch"])
    mine = run(base + ["--impl", "roam"])
    a, b = plain["epochs"][-1]["test_auc"], mine["epochs"][-1]["test_auc"]
    assert a > 0.7, plain
    # Same start, same batches, same update rules: the AUCs agree to float rounding.
    assert abs(a - b) < 0.005, (a, b)
    for p, m in zip(plain["epochs"], mine["epochs"]):
        assert abs(p["loss"] - m["loss"]) < 0.01, (p, m)


def test_two_nodes_with_ddp_learn_like_one(tmp_path, roam_bin):
    data = write_data(tmp_path)
    cmd = [roam_bin, "launch", "--nodes", "2", "--", sys.executable, str(EXAMPLE)]
    two = run(cmd + ["--data", str(data), "--impl", "roam", *ARGS])
    assert two["nodes"] == 2
    one = run([sys.executable, str(EXAMPLE), "--data", str(data), "--impl", "roam", *ARGS])
    a, b = one["epochs"][-1]["test_auc"], two["epochs"][-1]["test_auc"]
    assert b > 0.7, two
    assert abs(a - b) < 0.03, (a, b)


def test_wide_deep_roam_matches_plain_torch_in_one_process(tmp_path):
    data = write_data(tmp_path)
    base = [sys.executable, str(EXAMPLE), "--data", str(data), *ARGS, *WIDE]
    plain = run(base + ["--impl", "torch"])
    mine = run(base + ["--impl", "roam"])
    assert plain["model"] == mine["model"] == "wide-deep"
    a, b = plain["epochs"][-1]["test_auc"], mine["epochs"][-1]["test_auc"]
    assert a > 0.7, plain
    # The same wide ids, the same FTRL (roam's on the "wide" table, the example's in torch).
    assert abs(a - b) < 0.005, (a, b)
    for p, m in zip(plain["epochs"], mine["epochs"]):
        assert abs(p["loss"] - m["loss"]) < 0.01, (p, m)
    # The wide part trains: without it (the same run, --model deep) the losses differ.
    deep = run([sys.executable, str(EXAMPLE), "--data", str(data), *ARGS, "--impl", "roam"])
    assert deep["model"] == "deep"
    gaps = [abs(w["loss"] - d["loss"]) for w, d in zip(mine["epochs"], deep["epochs"])]
    assert max(gaps) > 1e-3, gaps


def test_wide_deep_on_two_nodes_learns_like_one(tmp_path, roam_bin):
    data = write_data(tmp_path)
    cmd = [roam_bin, "launch", "--nodes", "2", "--", sys.executable, str(EXAMPLE)]
    two = run(cmd + ["--data", str(data), "--impl", "roam", *ARGS, *WIDE])
    assert two["nodes"] == 2 and two["model"] == "wide-deep"
    one = run([sys.executable, str(EXAMPLE), "--data", str(data), "--impl", "roam", *ARGS, *WIDE])
    a, b = one["epochs"][-1]["test_auc"], two["epochs"][-1]["test_auc"]
    assert b > 0.7, two
    assert abs(a - b) < 0.03, (a, b)


def example_module():
    spec = importlib.util.spec_from_file_location("ctr_train_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("l1, l2", [(0.0, 0.0), (1.0, 0.5)])
def test_torch_ftrl_takes_roams_ftrl_steps(l1, l2):
    """60 sparse gradients (rows drawn with repeats) through a roam FTRL table's
    push_gradients and through the example's torch FTRL: the same weights. A step's repeated
    rows are summed first, as roam.torch pushes them and as the torch FTRL coalesces them."""
    import roam

    ex = example_module()
    seed = 20261129
    print(f"gradient seed {seed}")
    rng = np.random.default_rng(seed)
    rows, dim = 6, 2
    ftrl = {"alpha": 0.5, "beta": 1.0, "l1": l1, "l2": l2}
    param = torch.nn.Parameter(torch.zeros(rows, dim))
    opt = ex.FTRL([param], **ftrl)
    table = {"w": {"dim": dim, "num_ids": rows, "optimizer": {"kind": "ftrl", **ftrl}}}
    with roam.Node(tables=table) as node:
        w = node.worker(0)
        for _ in range(60):
            ids = rng.integers(0, rows, int(rng.integers(1, 9)))
            # Rows 0 and 1 get small gradients: with l1 their |z| stays below it (w = 0).
            scale = np.where(ids < 2, 0.05, 1.0)[:, None]
            grads = (rng.normal(0.0, 1.0, (len(ids), dim)) * scale).astype(np.float32)
            uniq, inverse = np.unique(ids, return_inverse=True)
            sums = np.zeros((len(uniq), dim), dtype=np.float32)
            np.add.at(sums, inverse, grads)
            w.push_gradients(uniq.astype(np.uint64), sums, table="w").wait()
            param.grad = torch.sparse_coo_tensor(
                torch.from_numpy(ids)[None], torch.from_numpy(grads), (rows, dim)
            )
            opt.step()
        got = w.pull(np.arange(rows, dtype=np.uint64), table="w").wait()
    mine = param.detach().numpy()
    assert np.abs(mine).max() > 0.01, mine  # the steps moved the weights
    if l1:
        assert (mine == 0).any() and (got == 0).any(), (mine, got)  # l1 keeps some at zero
    np.testing.assert_allclose(mine, got, rtol=1e-5, atol=1e-7)


def test_wide_ids_are_the_one_hot_ids_then_each_hashed_cross():
    ex = example_module()
    # splitmix64's first output from seed 0: the hash is the same on every platform.
    assert int(ex.splitmix64(np.zeros(1, dtype=np.uint64))[0]) == 0xE220A8397B1DCDAF
    # Rows of fields (a, bag b, c): ids offset per field as load() does (a: 0..3, b: 3..8, c: 8..).
    lengths = np.array([[1, 2, 1], [1, 0, 1], [1, 3, 1]])
    ids = np.array([0, 3, 5, 8, 1, 9, 2, 4, 6, 7, 8])
    split = ex.Split(np.array([1, 0, 1]), ids, lengths)
    crosses = ex.parse_crosses("all-pairs", ["a", "b", "c"])
    assert crosses == [(0, 1), (0, 2), (1, 2)]
    assert ex.parse_crosses("c*a", ["a", "b", "c"]) == [(2, 0)]
    wide = ex.wide_split(split, crosses, 10, 64)
    bags = [[[0], [3, 5], [8]], [[1], [], [9]], [[2], [4, 6, 7], [8]]]
    for r, bag in enumerate(bags):
        want = [x for field in bag for x in field]
        for a, b in crosses:
            for x in bag[a]:
                for y in bag[b]:
                    h = ex.cross_hash(a, b, np.array([x]), np.array([y]), 64)[0]
                    want.append(10 + int(h))
        got = wide.ids[wide.row_start[r] : wide.row_start[r + 1]]
        assert list(got) == want, (r, list(got), want)
        assert all(10 <= x < 74 for x in want[len(sum(bag, [])) :])
