"""Row initializers and dynamic key spaces (issue #17): `Node(initializer=..., dynamic=...)` on
one in-process node. Initial rows are a pure function of (seed, key); admission by count and
probability; the row budget holds under a stream of new ids; bad settings raise naming them."""

import time

import numpy as np
import pytest

import roam

DIM = 4


def u64(*keys):
    return np.array(keys, dtype=np.uint64)


def pull(w, keys):
    out = np.zeros(len(keys) * DIM, np.float32)
    w.pull(u64(*keys), out).wait()
    return out.reshape(len(keys), DIM)


NORMAL = {"kind": "normal", "mean": 0.5, "std": 0.1, "seed": 7}


def test_initializer_rows_are_a_function_of_seed_and_key():
    with roam.Node(value_lengths=DIM, sparse_keys=True, initializer=NORMAL) as a:
        first = pull(a.worker(0), [3, 2**63 + 5])
    with roam.Node(value_lengths=DIM, sparse_keys=True, initializer=NORMAL) as b:
        again = pull(b.worker(0), [3, 2**63 + 5])
    assert first.tobytes() == again.tobytes(), "another node creates the same rows"
    assert not np.array_equal(first[0], first[1])
    assert abs(first.mean() - 0.5) < 0.3


def test_uniform_initializer_on_a_dense_space():
    init = {"kind": "uniform", "low": -1.0, "high": 1.0, "seed": 3}
    with roam.Node(num_keys=100, value_lengths=DIM, initializer=init) as node:
        rows = pull(node.worker(0), list(range(100)))
    assert rows.min() >= -1.0 and rows.max() < 1.0
    assert rows.std() > 0.3


def test_count_admission_reads_the_initializer_and_drops_updates():
    dynamic = {"admission": {"kind": "count", "min_count": 3, "sketch_width": 1024}}
    with roam.Node(value_lengths=DIM, dynamic=dynamic, initializer=NORMAL) as node:
        w = node.worker(0)
        init = pull(w, [42])  # sighting 1: no row
        w.push(u64(42), np.ones(DIM, np.float32)).wait()  # sighting 2: dropped
        stats = node.stats()
        assert stats["rows_rejected"] == 2 and stats["grads_dropped"] == 1
        assert stats["keys_created"] == 0
        np.testing.assert_array_equal(pull(w, [42]), init)  # sighting 3: created
        w.push(u64(42), np.ones(DIM, np.float32)).wait()
        np.testing.assert_allclose(pull(w, [42]), init + 1)
        assert node.stats()["keys_created"] == 1


def test_probability_admission_is_fixed_per_id():
    dynamic = {"admission": {"kind": "probability", "p": 0.5, "seed": 1}}
    with roam.Node(value_lengths=DIM, dynamic=dynamic) as node:
        w = node.worker(0)
        keys = list(range(1000))
        pull(w, keys)
        created = node.stats()["keys_created"]
        pull(w, keys)
        assert node.stats()["keys_created"] == created, "the same ids again: no new row"
    assert 400 < created < 600


def test_row_budget_holds_and_evicts():
    dynamic = {"max_rows": 50}
    with roam.Node(value_lengths=DIM, dynamic=dynamic, optimizer="adagrad") as node:
        w = node.worker(0)
        for start in range(0, 2000, 100):
            keys = list(range(start, start + 100))
            pull(w, keys)
            w.push_gradients(u64(*keys), np.ones(100 * DIM, np.float32)).wait()
            assert node.stats()["keys_held"] <= 50
        stats = node.stats()
    assert stats["rows_evicted"] >= 2000 - 50
    assert stats["keys_held"] == 50


def test_ttl_in_steps_evicts_rows_untouched_for_that_many_steps():
    """`ttl_steps`: the node's timer looks at its clock (`advance_clock` ticks) and sweeps every
    two steps; rows never touched again go, rows read at every step stay with their pushes.
    The loop ticks until the cold rows are gone (bounded: the sweeps need only a few ticks and
    timer looks); the exact step counts are checked in the simulator
    (`ttl_in_steps_evicts_rows_untouched_for_that_many_ticks_and_time_alone_does_not`)."""
    with roam.Node(value_lengths=DIM, dynamic={"ttl_steps": 4}) as node:
        w = node.worker(0)
        cold, hot = list(range(100, 110)), list(range(10))
        for keys in (cold, hot):
            w.push(u64(*keys), np.ones(len(keys) * DIM, np.float32)).wait()
        deadline = time.monotonic() + 60
        while node.stats()["rows_evicted"] < len(cold):
            assert time.monotonic() < deadline, f"cold rows still held: {node.stats()}"
            w.advance_clock()
            pull(w, hot)
            time.sleep(0.002)
        np.testing.assert_array_equal(pull(w, hot), 1.0)
        assert node.stats()["rows_evicted"] == len(cold)
        # Evicted, so created again by the pull: the initializer's zeros.
        np.testing.assert_array_equal(pull(w, cold), 0.0)


def test_spill_brings_evicted_rows_back_trained(tmp_path):
    dynamic = {"max_rows": 50, "spill": True}
    with roam.Node(
        value_lengths=DIM, dynamic=dynamic, optimizer="sgd", spill_dir=tmp_path
    ) as node:
        w = node.worker(0)
        keys = list(range(1000))
        for _ in range(3):
            for start in range(0, 1000, 100):
                batch = keys[start : start + 100]
                pull(w, batch)
                w.push_gradients(u64(*batch), np.ones(100 * DIM, np.float32)).wait()
                assert node.stats()["keys_held"] <= 50
        # SGD with lr 0.01 from zeros: three steps each, none lost to an eviction.
        np.testing.assert_allclose(pull(w, keys), -0.03, rtol=1e-5)
        stats = node.stats()
    assert stats["rows_spilled"] == stats["rows_evicted"] > 0
    assert stats["rows_unspilled"] > 0 and stats["spill_errors"] == 0
    assert (tmp_path / "roam-spill-node-0.bin").exists()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"initializer": "ones"}, ValueError, "unknown initializer"),
        ({"initializer": {"kind": "uniform", "low": 1, "high": 0}}, ValueError, "uniform(1, 0)"),
        ({"initializer": {"kind": "normal", "sd": 1}}, ValueError, "unknown initializer key"),
        ({"dynamic": {"max_rows": 0}}, ValueError, "max_rows = 0"),
        ({"dynamic": {"admission": {"kind": "probability", "p": 2}}}, ValueError, "p = 2"),
        ({"dynamic": {"admission": "lru"}}, ValueError, "unknown admission"),
        ({"dynamic": {"budget": 3}}, ValueError, "unknown dynamic key"),
        ({"dynamic": {"ttl": -1}}, ValueError, "ttl"),
        ({"dynamic": {"ttl_steps": 1}}, ValueError, "ttl_steps = 1 is invalid"),
        ({"dynamic": {"ttl": 1.0, "ttl_steps": 8}}, ValueError, "and ttl_steps are both set"),
        ({"dynamic": 5}, TypeError, "dynamic must be a dict"),
        ({"dynamic": {"spill": 1.5}}, TypeError, "spill\" must be True or False"),
    ],
)
def test_bad_settings_are_named(kwargs, error, message):
    with pytest.raises(error) as info:
        roam.Node(value_lengths=DIM, sparse_keys=True, **kwargs)
    assert message in str(info.value)
