"""PyTorch tensors (CPU) in and out of roam without copies. Skipped without PyTorch."""

import numpy as np
import pytest

import roam

torch = pytest.importorskip("torch")


@pytest.fixture
def w():
    with roam.Node(num_keys=50, value_lengths=4) as node:
        yield node.worker(0)


def test_pull_into_a_tensor(w):
    w.set([1, 2], np.arange(8, dtype=np.float32)).wait()
    out = torch.zeros(2, 4)
    assert w.pull([1, 2], out).wait() is out  # through __dlpack__, in place
    assert torch.equal(out, torch.arange(8, dtype=torch.float32).reshape(2, 4))


def test_pull_into_a_numpy_view_of_a_tensor(w):
    w.set([3], np.full(4, 7.0, np.float32)).wait()
    t = torch.zeros(4)
    view = t.numpy()
    assert w.pull([3], view).wait() is view
    assert torch.all(t == 7)


def test_push_and_set_from_tensors(w):
    keys = torch.tensor([4, 5], dtype=torch.int64)  # int64 keys, as torch indexes
    w.set(keys, torch.ones(2, 4)).wait()
    w.push(keys.numpy(), torch.full((8,), 2.0)).wait()
    assert np.array_equal(w.pull([4, 5]).wait(), np.full((2, 4), 3.0))


def test_from_numpy_shares_memory_with_the_pulled_array(w):
    w.set([6], np.ones(4, np.float32)).wait()
    arr = w.pull([6]).wait()
    t = torch.from_numpy(arr)
    w.pull([6], arr).wait()
    assert t.data_ptr() == arr.ctypes.data


def test_bad_tensors(w):
    with pytest.raises(TypeError, match="float32"):
        w.pull([1], torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="C-contiguous"):
        w.pull([1], torch.zeros(4, 2).t())
    with pytest.raises(roam.AccessError, match="buffer holds 5 values"):
        w.pull([1], torch.zeros(5))
