"""API round-trips, zero-copy and error mapping on a single in-process node."""

import array
import gc

import numpy as np
import pytest

import roam


def u64(*keys):
    return np.array(keys, dtype=np.uint64)


def f32(values):
    return np.asarray(values, dtype=np.float32)


@pytest.fixture
def node():
    with roam.Node(num_keys=100, value_lengths=4, workers=2) as n:
        yield n


@pytest.fixture
def w(node):
    return node.worker(0)


class DLPackOnly:
    """An object that exposes its memory only through DLPack (like a CPU torch tensor)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_module_surface():
    assert isinstance(roam.__version__, str)
    for name in roam.__all__:
        assert getattr(roam, name) is not None
    assert issubclass(roam.AccessError, roam.RoamError)
    assert issubclass(roam.AccessError, ValueError)
    assert issubclass(roam.StartError, RuntimeError)
    assert issubclass(roam.WorkerError, IndexError)
    assert issubclass(roam.PeerGoneError, roam.OpError)
    assert issubclass(roam.PeerGoneError, ConnectionError)
    assert roam.AccessError.__module__ == "roam"
    assert roam.Node.__doc__ and roam.Worker.pull.__doc__ and roam.Ticket.wait.__doc__


def test_node_properties(node, w):
    assert (node.rank, node.num_nodes, node.workers_per_node) == (0, 1, 2)
    assert node.num_keys == 100 and node.value_length == 4 and node.value_len(99) == 4
    assert node.allocation == "static-range" and not node.closed
    assert node.data_addr is None
    assert (w.id, w.rank, w.num_nodes, w.workers_per_node, w.global_id) == (0, 0, 1, 2, 0)
    assert node.worker(1).global_id == 1
    assert w.num_keys == 100 and w.value_length == 4 and w.value_len(3) == 4
    assert node.worker(0) is w
    assert node.workers() == [w, node.worker(1)]
    assert "rank 0 of 1" in repr(node) and "Worker 0" in repr(w)


def test_push_pull_set_round_trip(w):
    keys = u64(3, 7, 11)
    assert w.push(keys, np.ones(12, np.float32)).wait() is None
    w.push(keys, np.full((3, 4), 2.0, np.float32)).wait()
    out = w.pull(keys).wait()
    assert out.dtype == np.float32 and out.shape == (3, 4)
    assert np.array_equal(out, np.full((3, 4), 3.0))
    vals = np.arange(12, dtype=np.float32).reshape(3, 4)
    w.set(keys, vals).wait()
    assert np.array_equal(w.pull(keys).wait(), vals)
    # Order follows the keys; repeated keys are fine.
    assert np.array_equal(w.pull(u64(11, 3, 11)).wait(), vals[[2, 0, 2]])
    # An empty batch.
    assert w.pull(u64()).wait().shape == (0, 4)
    w.push(u64(), np.zeros(0, np.float32)).wait()


def test_keys_of_any_integer_type(w):
    w.set(u64(5, 6), np.arange(8, dtype=np.float32)).wait()
    expected = np.arange(8, dtype=np.float32).reshape(2, 4)
    for keys in (
        [5, 6],
        (5, 6),
        range(5, 7),
        np.array([5, 6], dtype=np.int64),
        np.array([5, 6], dtype=np.int32),
        np.array([5, 6], dtype=np.uint8),
        np.array([[5, 6]], dtype=np.uint64),  # any shape, flattened
        np.array([5, 0, 6, 0], dtype=np.uint64)[::2],  # strided: converted
        DLPackOnly(np.array([5, 6], dtype=np.uint64)),
    ):
        assert np.array_equal(w.pull(keys).wait(), expected), keys


def test_pull_into_out_is_zero_copy(w):
    w.set(u64(1, 2), np.arange(8, dtype=np.float32)).wait()
    out = np.zeros((2, 4), np.float32)
    ticket = w.pull(u64(1, 2), out)
    result = w.wait(ticket)
    assert result is out
    assert np.array_equal(out, np.arange(8).reshape(2, 4))
    # Any shape holding the right number of values; a view writes through to its base.
    base = np.zeros(20, np.float32)
    view = base[4:12]
    assert w.pull(u64(2, 1), view).wait() is view
    assert np.array_equal(base[4:12], [4, 5, 6, 7, 0, 1, 2, 3])
    assert not base[:4].any() and not base[12:].any()


def test_other_buffers(w):
    w.set(u64(1, 2), np.arange(8, dtype=np.float32)).wait()
    # array.array and memoryview (buffer protocol).
    a = array.array("f", [0.0] * 8)
    assert w.pull([1, 2], a).wait() is a
    assert list(a) == list(range(8))
    m = memoryview(bytearray(32)).cast("f")
    assert w.pull([2, 1], m).wait() is m
    assert list(m) == [4, 5, 6, 7, 0, 1, 2, 3]
    # A DLPack-only object, as out and as vals.
    target = np.zeros(8, np.float32)
    d = DLPackOnly(target)
    assert w.pull([1, 2], d).wait() is d
    assert np.array_equal(target, np.arange(8))
    w.push([1, 2], DLPackOnly(np.ones(8, np.float32))).wait()
    assert np.array_equal(w.pull([1, 2]).wait().ravel(), np.arange(8) + 1)
    # Read-only values are fine for push/set.
    ro = np.ones(8, np.float32)
    ro.flags.writeable = False
    w.set([1, 2], ro).wait()
    assert w.pull([1, 2]).wait().sum() == 8


def test_tickets(w):
    t = w.push([1], f32([1, 1, 1, 1]))
    assert t.kind == "push" and "Ticket push" in repr(t)
    assert t.wait() is None
    assert t.is_finished() and w.is_finished(t)
    t = w.pull([1])
    assert t.kind == "pull"
    first = t.wait()
    assert t.wait() is first  # waiting again returns the same
    assert w.localize([1, 2]).kind == "localize"
    assert w.set([1], f32([0] * 4)).kind == "set"


def test_wait_all_and_dropped_tickets(w):
    tickets = [w.push([k], np.ones(4, np.float32)) for k in range(20)]
    w.wait_all()
    assert all(t.is_finished() for t in tickets)
    for _ in range(3):
        w.push(list(range(20)), np.ones(80, np.float32))  # ticket dropped at once
    gc.collect()
    w.wait_all()
    assert np.array_equal(w.pull(list(range(20))).wait(), np.full((20, 4), 4.0))


def test_pull_if_local(w):
    w.set([9], f32([1, 2, 3, 4])).wait()
    out = np.zeros(4, np.float32)
    assert w.pull_if_local(9, out) is True
    assert np.array_equal(out, [1, 2, 3, 4])
    with pytest.raises(roam.AccessError, match="buffer holds 3 values but the 1 keys have 4"):
        w.pull_if_local(9, np.zeros(3, np.float32))
    with pytest.raises(roam.AccessError, match="key 100 is out of range"):
        w.pull_if_local(100, out)
    with pytest.raises(roam.AccessError, match="key -2 is out of range"):
        w.pull_if_local(-2, out)


def test_localize_static_is_a_noop(w):
    t = w.localize(u64(1, 50, 99))
    assert t.is_finished()
    assert t.wait() is None


def test_barrier_single_worker():
    with roam.Node(num_keys=10, value_lengths=1) as node:
        w = node.worker(0)
        w.push([1], f32([1])).wait()
        w.barrier()
        assert w.pull([1]).wait()[0, 0] == 1


def test_per_key_lengths():
    with roam.Node(value_lengths=[1, 2, 3], allocation="dynamic") as node:
        assert node.num_keys == 3 and node.value_length is None
        assert [node.value_len(k) for k in range(3)] == [1, 2, 3]
        w = node.worker(0)
        w.set([2, 0], f32([1, 2, 3, 4])).wait()
        out = w.pull([0, 2, 1]).wait()
        assert out.shape == (6,)
        assert np.array_equal(out, [4, 1, 2, 3, 0, 0])
        with pytest.raises(roam.AccessError, match="the 2 keys have 3 values in total"):
            w.push([0, 1], f32([1, 1]))
    with roam.Node(num_keys=2, value_lengths=np.array([2, 5])) as node:
        assert node.value_len(1) == 5


def test_sparse_keys_take_any_uint64():
    with roam.Node(value_lengths=2, sparse_keys=True) as node:
        assert node.sparse_keys and node.num_keys is None
        assert node.allocation == "static-hash"
        w = node.worker(0)
        keys = np.array([0, 2**63, 2**64 - 2, 0x9E3779B97F4A7C15], dtype=np.uint64)
        assert np.array_equal(w.pull(keys).wait(), np.zeros((4, 2), dtype=np.float32))
        w.push(keys, np.ones((4, 2), dtype=np.float32)).wait()
        w.push(keys[:2], np.full((2, 2), 2, dtype=np.float32)).wait()
        assert np.array_equal(w.pull(keys).wait()[:, 0], [3, 3, 1, 1])
        # int64 keys are the same ids, bits reinterpreted.
        assert w.pull(np.array([-2], dtype=np.int64)).wait()[0, 0] == 1
    with pytest.raises(ValueError, match="num_keys .* must be omitted"):
        roam.Node(num_keys=10, value_lengths=2, sparse_keys=True)
    with pytest.raises(TypeError, match="one int"):
        roam.Node(value_lengths=[1, 2], sparse_keys=True)


def test_stats(node, w):
    w.pull([1, 2]).wait()
    stats = node.stats()
    assert stats["rank"] == 0 and stats["allocation"] == "static-range"
    assert stats["local_pull_keys"] == 2 and stats["keys_held"] == 100
    assert isinstance(stats["local_fraction"], float)
    assert w.stats()["local_pull_keys"] == 2


def test_shutdown_and_use_after():
    node = roam.Node(num_keys=10, value_lengths=2)
    w = node.worker(0)
    w.push([1], f32([1, 1])).wait()
    stats = node.shutdown()
    assert stats["local_push_keys"] == 1
    assert node.closed and node.shutdown() is None
    assert node.stats()["local_push_keys"] == 1
    with pytest.raises(roam.OpError, match="shut down"):
        w.pull([1])
    with pytest.raises(roam.OpError, match="shut down"):
        w.barrier()


def test_exit_with_exception_closes():
    with pytest.raises(KeyError):
        with roam.Node(num_keys=10, value_lengths=2) as node:
            raise KeyError("boom")
    assert node.closed


# ---- bad input raises the right exception, with the Rust message ----


def test_access_errors(w):
    with pytest.raises(
        roam.AccessError, match=r"^key 100 is out of range: the key space holds keys 0\.\.100$"
    ):
        w.pull(u64(1, 100))
    with pytest.raises(roam.AccessError, match=r"^key -1 is out of range"):
        w.pull(np.array([-1], dtype=np.int64))
    with pytest.raises(roam.AccessError, match=r"^key -3 is out of range"):
        w.push([-3], f32([0] * 4))
    with pytest.raises(roam.AccessError, match=r"^key 200 is out of range"):
        w.localize([200])
    with pytest.raises(
        roam.AccessError, match=r"^buffer holds 5 values but the 1 keys have 4 values in total$"
    ):
        w.pull([1], np.zeros(5, np.float32))
    with pytest.raises(roam.AccessError, match="buffer holds 3 values"):
        w.set([1], f32([1, 2, 3]))
    # An AccessError is a ValueError; nothing was changed.
    with pytest.raises(ValueError):
        w.push([1, 999], np.ones(8, np.float32))
    assert not w.pull([1]).wait().any()


def test_type_and_value_errors(w):
    with pytest.raises(TypeError, match="float32"):
        w.pull([1], np.zeros(4, np.float64))
    with pytest.raises(TypeError, match="float32"):
        w.push([1], np.zeros(4, np.float64))
    with pytest.raises(TypeError, match="not list"):
        w.push([1], [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(TypeError, match="keys must be integers"):
        w.pull(np.array([1.0]))
    with pytest.raises(TypeError, match="keys must be integers"):
        w.pull([1.5])
    with pytest.raises(TypeError, match="keys must be"):
        w.pull(3)
    with pytest.raises(TypeError, match="keys must be"):
        w.pull("12")
    with pytest.raises(ValueError, match="C-contiguous"):
        w.pull([1], np.zeros(8, np.float32)[::2])
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        w.pull([1], ro)
    with pytest.raises(TypeError, match="float32"):
        w.pull([1], np.zeros(4, ">f4"))  # big-endian


def test_keys_and_out_may_not_overlap(w):
    raw = memoryview(bytearray(64))
    keys, out = raw.cast("Q"), raw.cast("f")
    with pytest.raises(ValueError, match="out overlaps keys"):
        w.pull(keys[:2], out[2:10])


def test_worker_errors(node):
    with pytest.raises(roam.WorkerError, match="^worker 2 does not exist: this node has 2 workers$"):
        node.worker(2)
    with pytest.raises(IndexError):
        node.worker(-1)


def test_start_errors(monkeypatch):
    with pytest.raises(roam.StartError, match="^invalid key space: the key space must hold at least one key$"):
        roam.Node(num_keys=0, value_lengths=4)
    with pytest.raises(roam.StartError, match="has value length 0"):
        roam.Node(num_keys=10, value_lengths=0)
    with pytest.raises(roam.StartError, match="^workers_per_node must be at least 1$"):
        roam.Node(num_keys=10, value_lengths=1, workers=0)
    with pytest.raises(ValueError, match="unknown allocation \"fast\""):
        roam.Node(num_keys=10, value_lengths=1, allocation="fast")
    with pytest.raises(ValueError, match="unknown home"):
        roam.Node(num_keys=10, value_lengths=1, home="moon")
    with pytest.raises(ValueError, match="peer_timeout"):
        roam.Node(num_keys=10, value_lengths=1, peer_timeout=-1)
    with pytest.raises(TypeError, match="value_lengths is required"):
        roam.Node(num_keys=10)
    with pytest.raises(ValueError, match="num_keys is 4 but value_lengths has 3"):
        roam.Node(num_keys=4, value_lengths=[1, 1, 1])
    with pytest.raises(OverflowError):
        roam.Node(num_keys=-1, value_lengths=1)
    monkeypatch.delenv("ROAM_CLUSTER_TOKEN", raising=False)
    with pytest.raises(roam.StartError, match="ROAM_CLUSTER_TOKEN is not set"):
        roam.Node(num_keys=10, value_lengths=1, rank=0, num_nodes=2, coordinator="127.0.0.1:1")
    monkeypatch.setenv("ROAM_RANK", "one")
    with pytest.raises(roam.StartError, match='ROAM_RANK="one"'):
        roam.Node(num_keys=10, value_lengths=1)


def test_environment_configuration(monkeypatch):
    monkeypatch.setenv("ROAM_WORKERS_PER_NODE", "3")
    with roam.Node(num_keys=10, value_lengths=1) as node:
        assert node.workers_per_node == 3


# The second case runs with the work clock (and an hour-long period): it checks that the option
# is taken and that the sums stay exact; the Rust tests check when rounds start.
@pytest.mark.parametrize("sync", [dict(replica_sync_every=0.001),
                                  dict(replica_sync_every=3600.0, replica_sync_after_updates=50)])
def test_replicated_keys_and_sync_replicas(sync):
    import threading

    with roam.Node(num_keys=10, value_lengths=2, workers=2, replicated_keys=[1, 3],
                   **sync) as node:
        errors = []

        def work(i):
            try:
                w = node.worker(i)
                for _ in range(100):
                    w.push(u64(1, 3), f32([[1, 2], [3, 4]])).wait()
                w.sync_replicas()
                out = w.pull(u64(1, 3)).wait()
                assert np.array_equal(out, [[200, 400], [600, 800]]), out
            except Exception as e:  # surfaced below, with the thread's traceback lost
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        stats = node.stats()
        assert stats["replicated_keys"] == 2
        assert stats["local_push_keys"] == 400, "replica pushes stay on the fast path"
    with pytest.raises(roam.StartError, match="replicated key 10 is outside the key space"):
        roam.Node(num_keys=10, value_lengths=2, replicated_keys=[10])


def test_choosers():
    assert roam.choose_top_n([7, 3, 1, 4], [5, 9, 5, 0], 2) == [1, 3]
    # 20 accesses over 10 keys: mean 2.
    assert roam.choose_above_mean([0, 1, 2, 3, 5], [10, 4, 2, 1, 3], 10) == [0, 1, 2, 5]
    assert roam.choose_above_mean([0, 1, 2, 3, 5], [10, 4, 2, 1, 3], 10, alpha=2.0) == [0, 1]
    with pytest.raises(ValueError, match="2 keys but 1 counts"):
        roam.choose_top_n([1, 2], [1], 1)
