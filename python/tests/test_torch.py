"""PyTorch with roam: tensors in and out without copies, and the roam.torch embedding modules.

Skipped without PyTorch (CI does not install it). Randomized tests print their seed; set
ROAM_TORCH_SEED to replay one.
"""

import os
import pathlib
import subprocess
import sys
import threading

import numpy as np
import pytest

import roam

torch = pytest.importorskip("torch")
import roam.torch as rt  # noqa: E402 - needs torch

SEED = int(os.environ.get("ROAM_TORCH_SEED", "17"))
TORCH_JOB = pathlib.Path(__file__).with_name("torch_job.py")


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


# ---- roam.torch.Embedding / EmbeddingBag -------------------------------------------------------


@pytest.fixture
def seed():
    print(f"seed {SEED} (replay: ROAM_TORCH_SEED={SEED})")
    return SEED


@pytest.fixture
def node():
    with roam.Node(num_keys=40, value_lengths=3) as node:
        yield node


def test_forward_returns_the_rows_stored_in_roam(node):
    w = node.worker(0)
    table = torch.arange(120, dtype=torch.float32).reshape(40, 3)
    w.set(torch.arange(40), table).wait()
    emb = rt.Embedding(40, 3, node)
    ids = torch.tensor([[5, 7, 5], [39, 0, 7]])
    out = emb(ids)
    assert out.shape == (2, 3, 3) and out.requires_grad
    assert torch.equal(out, table[ids])
    # key_offset: row i is key key_offset + i.
    assert torch.equal(rt.Embedding(10, 3, w, key_offset=30)(torch.tensor([2])), table[32:33])


def test_backward_pushes_the_summed_gradient_of_duplicate_ids_only(node):
    w = node.worker(0)
    w.set(torch.arange(40), torch.ones(40, 3)).wait()
    emb = rt.Embedding(40, 3, node, lr=0.5)
    ids = torch.tensor([4, 9, 4, 4])
    (emb(ids) * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    table = w.pull(torch.arange(40)).wait()
    expected = np.ones((40, 3), np.float32)
    expected[4] -= 0.5 * 3 * np.array([1.0, 2.0, 3.0])  # used three times: gradient summed
    expected[9] -= 0.5 * np.array([1.0, 2.0, 3.0])
    assert np.allclose(table, expected)
    assert node.stats()["local_push_keys"] == 40 + 2, "one push of the two unique rows"


def test_no_gradient_no_push(node):
    emb = rt.Embedding(40, 3, node)
    with torch.no_grad():
        out = emb(torch.tensor([1, 2]))
    assert not out.requires_grad
    assert node.stats()["local_push_keys"] == 0


def test_an_empty_batch_pulls_and_pushes_nothing(node):
    out = rt.Embedding(40, 3, node)(torch.zeros(0, 2, dtype=torch.int64))
    assert out.shape == (0, 2, 3)
    out.sum().backward()
    bags = rt.EmbeddingBag(40, 3, node, mode="mean")(torch.zeros(0, dtype=torch.int64), torch.tensor([0, 0]))
    assert torch.equal(bags, torch.zeros(2, 3))  # two empty bags, as torch
    bags.sum().backward()
    assert node.stats()["local_push_keys"] == 0


def test_padding_idx_gets_no_update(node):
    emb = rt.Embedding(40, 3, node, lr=1.0, padding_idx=0)
    emb.init_normal_(seed=3)
    assert torch.equal(emb.read(torch.tensor([0])), torch.zeros(1, 3))
    before = emb.read(torch.tensor([0, 1]))
    emb(torch.tensor([0, 1, 0])).sum().backward()
    after = emb.read(torch.tensor([0, 1]))
    assert torch.equal(after[0], before[0])
    assert torch.allclose(after[1], before[1] - 1.0)


def _sgd_pair(seed, num, dim, make_torch, make_roam, w):
    """A plain torch module and a roam one with the same initial table."""
    torch.manual_seed(seed)
    plain = make_torch()
    ours = make_roam()
    ours.load_(plain.weight.detach())
    w.barrier()
    return plain, ours


def test_embedding_training_matches_torch_sparse_sgd(seed):
    num, dim, lr, steps = 50, 4, 0.1, 20
    with roam.Node(num_keys=num, value_lengths=dim) as node:
        w = node.worker(0)
        plain, ours = _sgd_pair(
            seed, num, dim, lambda: torch.nn.Embedding(num, dim, sparse=True),
            lambda: rt.Embedding(num, dim, node, lr=lr), w,
        )
        heads = [torch.nn.Linear(dim, 1) for _ in range(2)]
        heads[1].load_state_dict(heads[0].state_dict())
        opt_plain = torch.optim.SGD([*plain.parameters(), *heads[0].parameters()], lr=lr)
        opt_dense = torch.optim.SGD(heads[1].parameters(), lr=lr)  # dense part, any optimizer
        gen = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            ids = torch.randint(0, num, (8, 3), generator=gen)  # duplicates across the batch
            y = torch.randn(8, 3, 1, generator=gen)
            for emb, head, opt in ((plain, heads[0], opt_plain), (ours, heads[1], opt_dense)):
                opt.zero_grad()
                torch.nn.functional.mse_loss(head(torch.tanh(emb(ids))), y).backward()
                opt.step()
        table = torch.from_numpy(w.pull(torch.arange(num)).wait())
        assert torch.allclose(table, plain.weight.detach(), atol=1e-5), (
            (table - plain.weight).abs().max()
        )
        assert torch.allclose(heads[0].weight, heads[1].weight, atol=1e-5)


def test_lr_none_steps_rows_with_the_nodes_adagrad_like_torch_sparse_adagrad(seed):
    # lr=None: backward hands the gradients to roam's server-side optimizer (push_gradients);
    # roam's Adagrad keeps eps under the root, torch's adds it after, so they agree
    # to float rounding only while eps is far below every g², so eps is 1e-30 here (eps 1e-10
    # damped the first step of rows whose gradient is below 1e-5: 0.04 apart after 20 steps).
    num, dim, lr, steps = 50, 4, 0.1, 20
    optimizer = {"kind": "adagrad", "lr": lr, "eps": 1e-30}
    with roam.Node(num_keys=num, value_lengths=dim, optimizer=optimizer) as node:
        w = node.worker(0)
        plain, ours = _sgd_pair(
            seed, num, dim, lambda: torch.nn.Embedding(num, dim, sparse=True),
            lambda: rt.Embedding(num, dim, node, lr=None), w,
        )
        opt = torch.optim.Adagrad(plain.parameters(), lr=lr, eps=1e-30)
        gen = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            ids = torch.randint(0, num, (8, 3), generator=gen)  # duplicates across the batch
            y = torch.randn(8, 3, dim, generator=gen)
            for emb in (plain, ours):
                opt.zero_grad()
                torch.nn.functional.mse_loss(torch.tanh(emb(ids)), y).backward()
                opt.step()
        table = torch.from_numpy(w.pull(torch.arange(num)).wait())
        assert torch.allclose(table, plain.weight.detach(), atol=1e-5), (
            (table - plain.weight).abs().max()
        )


def test_lr_none_without_an_optimizer_fails_naming_it():
    with roam.Node(num_keys=10, value_lengths=2) as node:
        emb = rt.Embedding(10, 2, node, lr=None)
        with pytest.raises(Exception, match="optimizer"):
            emb(torch.tensor([1, 2])).sum().backward()
        with pytest.raises(ValueError, match="lr must be positive"):
            rt.Embedding(10, 2, node, lr=0.0)


@pytest.mark.parametrize(
    "mode,layout,weighted",
    [("sum", "offsets", False), ("mean", "offsets", False), ("sum", "offsets", True),
     ("mean", "2d", False), ("sum", "2d", True), ("sum", "last-offset", True)],
)
def test_embedding_bag_matches_torch_sparse_sgd(seed, mode, layout, weighted):
    num, dim, lr, steps = 30, 5, 0.2, 10
    last = layout == "last-offset"
    with roam.Node(num_keys=num, value_lengths=dim) as node:
        w = node.worker(0)
        plain, ours = _sgd_pair(
            seed, num, dim,
            lambda: torch.nn.EmbeddingBag(num, dim, mode=mode, sparse=True, include_last_offset=last),
            lambda: rt.EmbeddingBag(num, dim, node, mode=mode, lr=lr, include_last_offset=last), w,
        )
        opt = torch.optim.SGD(plain.parameters(), lr=lr)
        gen = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            if layout == "2d":
                ids, offsets = torch.randint(0, num, (6, 4), generator=gen), None
            else:
                lengths = torch.randint(0, 5, (6,), generator=gen)  # empty bags too
                ids = torch.randint(0, num, (int(lengths.sum()),), generator=gen)
                offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
                offsets = offsets if last else offsets[:-1]
            target = torch.randn(6, dim, generator=gen)
            psw = torch.rand(ids.shape, generator=gen) if weighted else None
            psw_ours = psw.clone().requires_grad_() if weighted else None
            psw_plain = psw.clone().requires_grad_() if weighted else None
            out_plain = plain(ids, offsets, per_sample_weights=psw_plain)
            out_ours = ours(ids, offsets, per_sample_weights=psw_ours)
            assert torch.allclose(out_ours, out_plain, atol=1e-5)
            opt.zero_grad()
            ((out_plain - target) ** 2).sum().backward()
            ((out_ours - target) ** 2).sum().backward()
            opt.step()
            if weighted:
                assert torch.allclose(psw_ours.grad, psw_plain.grad, atol=1e-4)
        table = torch.from_numpy(w.pull(torch.arange(num)).wait())
        assert torch.allclose(table, plain.weight.detach(), atol=1e-4), (
            (table - plain.weight).abs().max()
        )


def test_a_small_model_trains_and_its_loss_falls(seed):
    # Click model: a bag of 4 feature ids per example; the label depends on the ids only.
    num, dim = 200, 8
    gen = torch.Generator().manual_seed(seed)
    data = torch.randint(0, num, (2048, 4), generator=gen)
    good = torch.rand(num, generator=gen) < 0.5
    labels = (good[data].sum(1) >= 2).float()
    with roam.Node(num_keys=num, value_lengths=dim) as node:
        torch.manual_seed(seed)
        emb = rt.EmbeddingBag(num, dim, node, mode="sum", lr=0.05)
        emb.init_normal_(std=0.1, seed=seed)
        mlp = torch.nn.Sequential(torch.nn.Linear(dim, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        opt = torch.optim.Adam(mlp.parameters(), lr=0.01)
        losses = []
        for epoch in range(6):
            total = 0.0
            for b in range(0, len(data), 64):
                ids, y = data[b : b + 64], labels[b : b + 64]
                emb.prefetch(data[b + 64 : b + 128])  # localize: a no-op on static allocation
                logits = mlp(emb(ids)).squeeze(1)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item() * len(y)
            losses.append(total / len(data))
        print("losses", losses)
        assert losses[-1] < 0.5 * losses[0], losses


def test_threads_each_use_their_own_worker():
    num, dim, steps = 64, 2, 25
    with roam.Node(num_keys=num, value_lengths=dim, workers=2) as node:
        emb = rt.Embedding(num, dim, node, lr=1.0)  # one module, shared by both threads
        with pytest.raises(RuntimeError, match="set_worker"):
            emb(torch.tensor([0]))
        errors, used = [], []

        def run(i):
            try:
                rt.set_worker(node.worker(i))
                used.append(emb.worker.id)
                ids = torch.arange(i, num, 2)  # disjoint rows per thread
                for _ in range(steps):
                    emb(ids).sum().backward()  # gradient 1: each row falls by 1 per step
                node.worker(i).barrier()
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads) and not errors, errors
        assert sorted(used) == [0, 1]
        rt.set_worker(node.worker(0))
        try:
            assert torch.equal(emb.read(torch.arange(num)), torch.full((num, dim), -float(steps)))
        finally:
            rt.set_worker(None)


def test_any_64_bit_id_on_sparse_keys():
    with roam.Node(value_lengths=2, sparse_keys=True) as node:
        emb = rt.EmbeddingBag(None, 2, node, mode="sum", lr=1.0)
        ids = torch.tensor([2**62 + 5, -3, 2**62 + 5])  # -3 is the key 2**64 - 3
        assert torch.equal(emb(ids, torch.tensor([0])), torch.zeros(1, 2))  # created as zeros
        emb(ids, torch.tensor([0])).sum().backward()
        got = node.worker(0).pull(np.array([2**62 + 5, 2**64 - 3], np.uint64)).wait()
        assert np.array_equal(got, [[-2, -2], [-1, -1]])


def test_prefetch_by_intent_counts_an_intent():
    with roam.Node(num_keys=20, value_lengths=2, allocation="dynamic") as node:
        emb = rt.Embedding(20, 2, node)
        emb.prefetch(torch.tensor([3, 4, 3]), clock=5)
        emb.prefetch(torch.tensor([1, 2]))  # localize: keys already here
        node.worker(0).wait_all()
        stats = node.stats()
        assert (stats["intents"], stats["intent_keys"]) == (1, 2), stats


def test_bad_input_names_the_culprit(node):
    emb = rt.Embedding(40, 3, node)
    with pytest.raises(IndexError, match="id 40 is outside"):
        emb(torch.tensor([1, 40]))
    with pytest.raises(IndexError, match="id -1 is outside"):
        emb(torch.tensor([-1]))
    with pytest.raises(TypeError, match="int64 or int32"):
        emb(torch.tensor([1.0]))
    with pytest.raises(ValueError, match="embedding_dim 4 differs from the value length 3"):
        rt.Embedding(40, 4, node)
    with pytest.raises(ValueError, match="exceed the node's key space of 40"):
        rt.Embedding(30, 3, node, key_offset=20)
    with pytest.raises(ValueError, match="sparse_keys"):
        rt.Embedding(None, 3, node)
    with pytest.raises(ValueError, match="mode must be 'sum' or 'mean', not 'max'"):
        rt.EmbeddingBag(40, 3, node, mode="max")
    bag = rt.EmbeddingBag(40, 3, node, mode="mean")
    with pytest.raises(ValueError, match="per_sample_weights needs mode='sum'"):
        bag(torch.tensor([[1, 2]]), per_sample_weights=torch.ones(1, 2))
    with pytest.raises(ValueError, match="needs offsets"):
        bag(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="shape \\(n, 3\\)"):
        emb.load_(torch.zeros(2, 2))
    assert node.stats()["local_push_keys"] == 0, "nothing was written"


def test_two_nodes_train_one_table(roam_bin):
    cmd = [roam_bin, "launch", "--nodes", "2", "--", sys.executable, str(TORCH_JOB)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{out}"
    for rank in (0, 1):
        assert f"[node {rank}] OK torch rank {rank}" in out, out


def test_modules_address_tables_past_the_first_128():
    # Table 129's keys are 129 << 56 | id, past 2^63: negative as torch's int64, which the
    # module hands roam as their uint64 bit patterns.
    tables = {f"t{i}": {"dim": 1, "num_ids": 4} for i in range(129)}
    tables["last"] = {"dim": 2, "num_ids": 8, "optimizer": {"kind": "sgd", "lr": 0.5},
                      "initializer": {"kind": "normal", "mean": 0.0, "std": 0.1, "seed": 7}}
    with roam.Node(tables=tables, workers=1) as node:
        w = node.worker(0)
        last = rt.Embedding(8, 2, node, table="last", lr=None, padding_idx=3)
        ids = np.array([5, 6], np.uint64)
        first = w.pull(ids, table="last").wait()
        out = last(torch.tensor([5, 6, 3]))
        pad = w.pull(np.array([3], np.uint64), table="last").wait()
        assert torch.equal(out, torch.from_numpy(np.concatenate([first, pad])))
        out.sum().backward()
        # One SGD step of the table's optimizer on each row; the padding row keeps its value.
        np.testing.assert_allclose(w.pull(ids, table="last").wait(), first - 0.5, rtol=1e-6)
        np.testing.assert_array_equal(w.pull(np.array([3], np.uint64), table="last").wait(), pad)
        # set/init and prefetch address the same rows.
        t128 = rt.Embedding(4, 1, node, table="t128", lr=0.1)
        t128.load_(torch.tensor([[1.0], [2.0], [3.0], [4.0]]))
        t128.prefetch(torch.tensor([0, 3]))
        np.testing.assert_array_equal(
            w.pull(np.arange(4, dtype=np.uint64), table="t128").wait(), [[1.0], [2.0], [3.0], [4.0]])
        np.testing.assert_array_equal(
            w.pull(np.arange(4, dtype=np.uint64), table="t0").wait(), [[0.0]] * 4)


def test_modules_on_named_tables_use_each_tables_dim_and_optimizer():
    tables = {
        "user": {"dim": 4, "num_ids": 10, "optimizer": {"kind": "adagrad", "lr": 0.1},
                 "initializer": {"kind": "normal", "mean": 0.0, "std": 0.1, "seed": 3}},
        "item": {"dim": 2, "dynamic": True, "optimizer": {"kind": "sgd", "lr": 0.5}},
    }
    with roam.Node(tables=tables, workers=1) as node:
        w = node.worker(0)
        users = rt.Embedding(10, 4, node, table="user", lr=None)
        ids = torch.tensor([0, 9, 0])
        out = users(ids)
        first = w.pull(np.array([0, 9], np.uint64), table="user").wait()
        assert torch.equal(out, torch.from_numpy(first)[torch.tensor([0, 1, 0])])
        weights = torch.tensor([[1.0], [2.0], [3.0]])
        (out * weights).sum().backward()
        # One Adagrad step of the table's optimizer on each unique row's summed gradient.
        g = np.array([[4.0] * 4, [2.0] * 4], np.float32)
        want = first - np.float32(0.1) * g / np.sqrt(g * g + np.float32(1e-6))
        np.testing.assert_allclose(
            w.pull(np.array([0, 9], np.uint64), table="user").wait(), want, rtol=1e-6)

        items = rt.EmbeddingBag(None, 2, node, table="item", mode="sum", lr=None)
        big = 2**40 + 5
        bags = items(torch.tensor([[big, 7]]))
        assert torch.equal(bags, torch.zeros(1, 2)), "a dynamic table's rows start at zero"
        bags.sum().backward()
        np.testing.assert_array_equal(
            w.pull(np.array([big, 7], np.uint64), table="item").wait(), [[-0.5, -0.5]] * 2)
        # The user table's rows are untouched by the item table's step.
        np.testing.assert_allclose(
            w.pull(np.array([0, 9], np.uint64), table="user").wait(), want, rtol=1e-6)

        with pytest.raises(ValueError, match="no table named 'movie'"):
            rt.Embedding(10, 4, node, table="movie")
        with pytest.raises(ValueError, match="embedding_dim 3 differs from table 'user'"):
            rt.Embedding(10, 3, node, table="user")
        with pytest.raises(IndexError, match="outside table 'item'"):
            items(torch.tensor([[2**56, 1]]))
