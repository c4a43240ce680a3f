"""A named table opened from a roam checkpoint without roam (issue #17): the loader shown in
docs/reliability.md ("Opening a table without roam"), read from that file and run as it is
with the `safetensors` package on a checkpoint roam wrote, gives the rows a worker pulls and
the optimizer state beside them. Skipped when `safetensors` is not installed."""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import roam

pytest.importorskip("safetensors.numpy")

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def documented_loader():
    """`load_table` as docs/reliability.md shows it: the first Python block after the heading,
    executed in a namespace of its own (it imports only json, numpy and safetensors)."""
    text = DOC.read_text()
    section = text[text.index("### Opening a table without roam"):]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace = {}
    exec(compile(block, str(DOC), "exec"), namespace)
    assert "roam" not in namespace, "the documented loader must not need roam"
    return namespace["load_table"]


def u64(*ids):
    return np.array(ids, dtype=np.uint64)


TABLES = {
    "user": {"dim": 4, "num_ids": 10, "optimizer": {"kind": "adagrad", "lr": 0.1},
             "initializer": {"kind": "normal", "mean": 0.0, "std": 0.1, "seed": 3}},
    "item": {"dim": 2, "dynamic": True, "optimizer": {"kind": "sgd", "lr": 0.5}},
    "bias": {"dim": 1, "num_ids": 5},
    "unused": {"dim": 2, "num_ids": 3},
}


def test_a_table_loads_from_the_checkpoint_with_safetensors(tmp_path):
    load_table = documented_loader()
    ckpt = tmp_path / "ckpt"
    g = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    with roam.Node(tables=TABLES, workers=1) as node:
        w = node.worker(0)
        w.push_gradients(u64(0, 9), g, table="user").wait()
        w.push_gradients(u64(2**40, 7), np.ones((2, 2), np.float32), table="item").wait()
        users = w.pull(u64(*range(10)), table="user").wait()
        items = w.pull(u64(7, 2**40), table="item").wait()
        biases = w.pull(u64(3, 1), table="bias").wait()
        w.checkpoint(str(ckpt))

    ids, rows, state = load_table(ckpt, "user")
    assert ids.tolist() == list(range(10)), "every id used (all of them)"
    np.testing.assert_array_equal(rows, users)
    # Adagrad's state beside each row: the sum of squared gradients (one per value).
    assert state.shape == (10, 4)
    np.testing.assert_array_equal(state[[0, 9]], g * g)
    np.testing.assert_array_equal(state[1:9], 0)

    ids, rows, _ = load_table(ckpt, "item")
    assert ids.tolist() == [7, 2**40], "a dynamic table: the rows it created"
    np.testing.assert_array_equal(rows, items)

    # A row of a dense table too is created on first use: the checkpoint holds ids 1 and 3 of
    # the five (the others read as the initializer's zeros), without optimizer state.
    ids, rows, state = load_table(ckpt, "bias")
    assert ids.tolist() == [1, 3] and state.shape == (2, 0)
    np.testing.assert_array_equal(rows, biases[[1, 0]])

    # A table without a row in the shard still has its tensors, of no rows.
    ids, rows, state = load_table(ckpt, "unused")
    assert ids.shape == (0,) and rows.shape == (0, 2) and state.shape == (0, 0)


def test_a_table_of_two_shards_loads_with_safetensors(roam_bin, tmp_path):
    """Two nodes (`roam launch --nodes 2`), one shard each: the loader gathers a table's rows
    from both, and they are what a worker pulls."""
    job = pathlib.Path(__file__).with_name("cluster_job.py")
    cmd = [roam_bin, "launch", "--nodes", "2", "--workers-per-node", "1", "--",
           sys.executable, str(job), "checkpoint-tables"]
    env = dict(os.environ, ROAM_TEST_CHECKPOINT=str(tmp_path))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{out}"
    assert len(list((tmp_path / "ckpt").glob("*.safetensors"))) == 2, out
    load_table = documented_loader()
    pulled = np.load(tmp_path / "pulled.npz")

    ids, rows, state = load_table(tmp_path / "ckpt", "user")
    order = np.argsort(ids)
    assert ids[order].tolist() == list(range(40)), "every id, once, from the two shards"
    np.testing.assert_array_equal(rows[order], pulled["users"])
    # Adagrad's accumulator: each id got one gradient, from node id % 2 (cluster_job.py).
    g = {r: np.arange(60, dtype=np.float32).reshape(20, 3) - 4 * r for r in (0, 1)}
    expected = np.stack([g[u % 2][u // 2] ** 2 for u in range(40)])
    np.testing.assert_array_equal(state[order], expected)

    items = [5, 2**33, 2**50 + 1, 77]
    ids, rows, _ = load_table(tmp_path / "ckpt", "item")
    assert sorted(ids.tolist()) == sorted(items)
    by_id = dict(zip(ids.tolist(), rows))
    np.testing.assert_array_equal(np.stack([by_id[i] for i in items]), pulled["items"])
