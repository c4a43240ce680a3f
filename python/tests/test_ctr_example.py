"""The CTR example (examples/ctr/train.py) at a tiny size: roam's module and the plain torch
baseline reach the same test AUC in one process, and the roam model trains under `roam launch
--nodes 2` (DDP over gloo for the MLP). Skipped without torch. The data is generated here (a
planted logistic model over 4 fields, one of them a bag), so the test needs no download."""

import json
import pathlib
import random
import subprocess
import sys

import pytest

from conftest import REPO

torch = pytest.importorskip("torch")

EXAMPLE = REPO / "examples" / "ctr" / "train.py"
ARGS = ["--epochs", "2", "--dim", "8", "--hidden", "16", "--batch", "64", "--lr", "0.05"]


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
