"""A named table opened from a roam checkpoint without roam (issue #17): the loader documented
in docs/reliability.md ("Opening a table without roam"), run with the `safetensors` package on a
checkpoint roam wrote, gives the rows a worker pulls and the optimizer state beside them.
Skipped when `safetensors` is not installed."""

import json

import numpy as np
import pytest

import roam

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def load_table(d, name):
    """The documented loader: (ids, rows [n, dim], state [n, hidden]) of table `name`."""
    m = json.load(open(f"{d}/manifest.json"))
    t = [x["name"] for x in m["tables"]].index(name)
    info = m["tables"][t]
    dim = info["dim"]
    rec = dim * (1 + info["hidden_per_value"]) + info["hidden_per_key"]
    ids, recs = [], []
    for shard in m["shards"]:
        s = safetensors_numpy.load_file(f"{d}/{shard['file']}")
        lo, hi = np.searchsorted(s["keys"], np.array([t << 56, (t + 1) << 56], np.uint64))
        ids.append(s["keys"][lo:hi] & np.uint64((1 << 56) - 1))
        recs.append(s["values"][s["offsets"][lo] : s["offsets"][hi]].reshape(hi - lo, rec))
    recs = np.concatenate(recs)
    return np.concatenate(ids), recs[:, :dim], recs[:, dim:]


def u64(*ids):
    return np.array(ids, dtype=np.uint64)


TABLES = {
    "user": {"dim": 4, "num_ids": 10, "optimizer": {"kind": "adagrad", "lr": 0.1},
             "initializer": {"kind": "normal", "mean": 0.0, "std": 0.1, "seed": 3}},
    "item": {"dim": 2, "dynamic": True, "optimizer": {"kind": "sgd", "lr": 0.5}},
    "bias": {"dim": 1, "num_ids": 5},
}


def test_a_table_loads_from_the_checkpoint_with_safetensors(tmp_path):
    ckpt = tmp_path / "ckpt"
    g = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    with roam.Node(tables=TABLES, workers=1) as node:
        w = node.worker(0)
        w.push_gradients(u64(0, 9), g, table="user").wait()
        w.push_gradients(u64(2**40, 7), np.ones((2, 2), np.float32), table="item").wait()
        users = w.pull(u64(*range(10)), table="user").wait()
        items = w.pull(u64(7, 2**40), table="item").wait()
        w.checkpoint(str(ckpt))

    ids, rows, state = load_table(ckpt, "user")
    assert ids.tolist() == list(range(10)), "a dense table: every id"
    np.testing.assert_array_equal(rows, users)
    # Adagrad's state beside each row: the sum of squared gradients (one per value).
    assert state.shape == (10, 4)
    np.testing.assert_array_equal(state[[0, 9]], g * g)
    np.testing.assert_array_equal(state[1:9], 0)

    ids, rows, _ = load_table(ckpt, "item")
    assert ids.tolist() == [7, 2**40], "a dynamic table: the rows it created"
    np.testing.assert_array_equal(rows, items)

    ids, rows, state = load_table(ckpt, "bias")
    assert ids.tolist() == list(range(5)) and rows.shape == (5, 1) and state.shape == (5, 0)
