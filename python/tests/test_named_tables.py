"""Named tables (issue #17): `Node(tables=...)` and `table=` on the worker's operations, on one
in-process node. Each table has its own dimension, initializer, optimizer and kind; rows are
seeded by table and id; a dynamic table's budget evicts its own rows only; a checkpoint keeps
every table; bad names, ids and settings raise naming them."""

import numpy as np
import pytest

import roam


def u64(*ids):
    return np.array(ids, dtype=np.uint64)


NORMAL = {"kind": "normal", "mean": 0.0, "std": 0.1, "seed": 3}


def tables(item_dynamic=None):
    return {
        "user": {"dim": 4, "num_ids": 10, "optimizer": {"kind": "adagrad", "lr": 0.1},
                 "initializer": NORMAL},
        "item": {"dim": 2, "dynamic": item_dynamic or True,
                 "optimizer": {"kind": "sgd", "lr": 0.5}},
        "bias": {"dim": 1, "num_ids": 5},
    }


def test_tables_have_their_own_dims_optimizers_and_initializers():
    with roam.Node(tables=tables(), workers=1) as node:
        assert node.tables == [("user", 4), ("item", 2), ("bias", 1)]
        w = node.worker(0)
        users = w.pull(u64(0, 9), table="user").wait()
        assert users.shape == (2, 4)
        assert not np.array_equal(users[0], users[1]), "seeded by id"
        items = w.pull(u64(2**55, 7), table="item").wait()
        assert items.shape == (2, 2)
        np.testing.assert_array_equal(items, 0, "zeros: the default initializer")

        # Adagrad on "user" (from its initial row), SGD on "item", plain pushes on "bias".
        g = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
        w.push_gradients(u64(0, 9), g, table="user").wait()
        a = g * g
        want = users - np.float32(0.1) * g / np.sqrt(a + np.float32(1e-6))
        np.testing.assert_allclose(w.pull(u64(0, 9), table="user").wait(), want, rtol=1e-6)
        w.push_gradients(u64(2**55), np.ones(2, np.float32), table="item").wait()
        np.testing.assert_array_equal(w.pull(u64(2**55), table="item").wait(), [[-0.5, -0.5]])
        w.push(u64(4, 4), np.ones(2, np.float32), table="bias").wait()
        w.set(u64(1), np.full(1, 7, np.float32), table="bias").wait()
        np.testing.assert_array_equal(w.pull(u64(4, 1), table="bias").wait(), [[2], [7]])
        w.localize(u64(3), table="user").wait()
        # The same id in another table is another row.
        assert not np.array_equal(w.pull(u64(4), table="user").wait()[0, :1],
                                  w.pull(u64(4), table="bias").wait()[0])

    with roam.Node(tables=tables(), workers=1) as again:
        first = again.worker(0).pull(u64(0, 9), table="user").wait()
        np.testing.assert_array_equal(first, users, "every node creates the same rows")


def test_a_dynamic_tables_budget_evicts_its_own_rows_only():
    budget = {"max_rows": 8}
    with roam.Node(tables=tables(budget), workers=1) as node:
        w = node.worker(0)
        w.push(u64(0, 1, 2, 3, 4), np.full(5, 2, np.float32), table="bias").wait()
        for start in range(0, 200, 20):
            ids = u64(*range(start, start + 20))
            w.push(ids, np.ones(40, np.float32), table="item").wait()
        stats = node.stats()
        assert stats["rows_evicted"] >= 200 - 8, stats
        # The budget counts "item" rows: the "bias" rows were never candidates.
        np.testing.assert_array_equal(w.pull(u64(0, 1, 2, 3, 4), table="bias").wait(), 2)
        np.testing.assert_array_equal(w.pull(u64(*range(10)), table="user").wait().shape, (10, 4))


def test_tables_survive_a_checkpoint(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    with roam.Node(tables=tables(), workers=1) as node:
        w = node.worker(0)
        w.push_gradients(u64(5), np.ones((1, 4), np.float32), table="user").wait()
        w.push_gradients(u64(2**40), np.ones((1, 2), np.float32), table="item").wait()
        user = w.pull(u64(5), table="user").wait()
        w.checkpoint(ckpt)
    with roam.Node(tables=tables(), workers=1, restore_from=ckpt) as node:
        w = node.worker(0)
        np.testing.assert_array_equal(w.pull(u64(5), table="user").wait(), user)
        np.testing.assert_array_equal(w.pull(u64(2**40), table="item").wait(), [[-0.5, -0.5]])
    changed = tables()
    changed["item"]["dim"] = 3
    with pytest.raises(roam.RoamError, match="table \"item\""):
        roam.Node(tables=changed, workers=1, restore_from=ckpt)


def test_bad_tables_ids_and_settings_raise_by_name():
    with roam.Node(tables=tables(), workers=1) as node:
        w = node.worker(0)
        with pytest.raises(roam.AccessError, match="no table named \"items\""):
            w.pull(u64(1), table="items")
        with pytest.raises(roam.AccessError, match="id 10 is out of range for table \"user\""):
            w.pull(u64(10), table="user")
        with pytest.raises(roam.AccessError, match="table \"bias\" has no optimizer"):
            w.push_gradients(u64(1), np.ones(1, np.float32), table="bias")
        with pytest.raises(roam.AccessError):
            w.push(u64(1, 2), np.ones(3, np.float32), table="item")
    with pytest.raises(ValueError, match="table \"z\": dim = 0"):
        roam.Node(tables={"z": {"dim": 0, "num_ids": 3}})
    with pytest.raises(ValueError, match="table \"u\" needs \"num_ids\""):
        roam.Node(tables={"u": {"dim": 2}})
    with pytest.raises(ValueError, match="leave out num_keys"):
        roam.Node(num_keys=4, tables={"u": {"dim": 2, "num_ids": 3}})
    with pytest.raises(ValueError, match="table \"u\": .*beta2"):
        roam.Node(tables={"u": {"dim": 2, "num_ids": 3,
                                "optimizer": {"kind": "adam", "beta2": 2.0}}})
    with roam.Node(num_keys=4, value_lengths=1) as plain:
        with pytest.raises(roam.AccessError, match="no named tables"):
            plain.worker(0).pull(u64(1), table="user")


def test_torch_embedding_of_a_named_table():
    torch = pytest.importorskip("torch")
    import roam.torch as rt

    with roam.Node(tables=tables(), workers=1) as node:
        items = rt.Embedding(None, 2, node, table="item", lr=None)
        out = items(torch.tensor([2**50, 3, 3]))
        assert out.shape == (3, 2)
        out.sum().backward()  # gradient 1 for 2**50, 2 for 3; the table's SGD (lr 0.5) steps them
        rows = node.worker(0).pull(u64(2**50, 3), table="item").wait()
        np.testing.assert_array_equal(rows, [[-0.5, -0.5], [-1.0, -1.0]])
        with pytest.raises(ValueError, match="table 'user'"):
            rt.Embedding(10, 3, node, table="user")
        with pytest.raises(ValueError, match="no table named 'ads'"):
            rt.Embedding(10, 4, node, table="ads")
        with pytest.raises(IndexError, match="outside table 'item'"):
            items(torch.tensor([-1]))
