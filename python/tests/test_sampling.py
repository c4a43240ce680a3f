"""Sampling (NuPS) on a single in-process node: samplers, schemes, values, pushes, errors.

The 2-node runs (remote values, `local` keeping to the node's keys) are in test_cluster.py.
"""

import gc
import threading

import numpy as np
import pytest

import roam

NUM_KEYS = 100
DIM = 3
SCHEMES = ["naive", "preloc", "pool:4", "pool:3:strict", "local", "local:next"]


def expected_values(keys):
    """The values set for `keys` by `set_all`: key k holds [k, k + 0.5, -k]."""
    k = keys.astype(np.float32)
    return np.stack([k, k + 0.5, -k], axis=1)


def set_all(w):
    keys = np.arange(NUM_KEYS, dtype=np.uint64)
    w.set(keys, expected_values(keys)).wait()


def samplers_for(scheme):
    weights = np.zeros(20)
    weights[[1, 4, 5, 19]] = [1.0, 2.0, 0.5, 4.0]
    return [
        roam.Sampler.uniform(10, 20, stride=2, scheme=scheme),  # even keys 10..48
        roam.Sampler.log_uniform(50, 50, scheme=scheme),  # 50..99, smaller likelier
        roam.Sampler.weighted(weights, first=3, stride=3, scheme=scheme),  # keys 6, 15, 18, 60
        roam.Sampler.uniform(0, 30, scheme=scheme, with_replacement=False),
    ]


@pytest.mark.parametrize("allocation", ["static-range", "dynamic"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_samples_the_support_with_its_values(scheme, allocation):
    samplers = samplers_for(scheme)
    with roam.Node(NUM_KEYS, DIM, allocation=allocation, samplers=samplers) as node:
        w = node.worker(0)
        set_all(w)
        for sampler_id, sampler in enumerate(samplers):
            n = 25
            sample = w.prepare_sample(sampler_id, n)
            assert (sample.sampler, sample.size, sample.remaining) == (sampler_id, n, n)
            keys1, vals1 = w.pull_sample(sample, 10)
            assert sample.remaining == 15
            keys2, vals2 = w.pull_sample(sample, 15)
            assert sample.remaining == 0
            assert w.finish_sample(sample) == 0
            assert sample.finished
            keys = np.concatenate([keys1, keys2])
            vals = np.concatenate([vals1, vals2])
            assert keys.dtype == np.uint64 and keys.shape == (n,)
            assert vals.dtype == np.float32 and vals.shape == (n, DIM)
            assert all(int(k) in sampler for k in keys), (sampler, keys)
            assert all(sampler.probability(int(k)) > 0 for k in keys), (sampler, keys)
            assert np.array_equal(vals, expected_values(keys)), (sampler, keys, vals)
            if not sampler.with_replacement:
                assert len(set(keys.tolist())) == n, keys


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pushes_to_sampled_keys_land(scheme):
    samplers = [roam.Sampler.uniform(0, NUM_KEYS, scheme=scheme)]
    with roam.Node(NUM_KEYS, DIM, allocation="dynamic", samplers=samplers) as node:
        w = node.worker(0)
        counts = np.zeros(NUM_KEYS, np.int64)
        for _ in range(5):
            with w.prepare_sample(0, 16) as sample:
                keys, vals = w.pull_sample(sample)
            assert sample.finished
            # The values reflect every earlier push (a key named twice is pushed twice).
            assert np.array_equal(vals[:, 0], counts[keys.astype(np.int64)])
            w.push(keys, np.ones_like(vals)).wait()
            np.add.at(counts, keys.astype(np.int64), 1)
        out = w.pull(np.arange(NUM_KEYS, dtype=np.uint64)).wait()
        assert np.array_equal(out[:, 0], counts) and counts.sum() == 80


def test_sampler_objects():
    s = roam.Sampler.uniform(10, 20, stride=2, scheme="pool:16")
    assert (s.distribution, s.first, s.stride, s.count) == ("uniform", 10, 2, 20)
    assert (s.scheme, s.with_replacement, s.group_draws) == ("pool:16", True, 250)
    assert s.keeps_distribution
    assert 10 in s and 48 in s and 11 not in s and 50 not in s and -1 not in s
    assert s.probability(12) == pytest.approx(1 / 20) and s.probability(13) == 0
    assert repr(s) == 'Sampler.uniform(10, 20, stride=2, scheme="pool:16", with_replacement=True)'
    lu = roam.Sampler.log_uniform(0, 9, scheme="local:next", with_replacement=False)
    assert lu.distribution == "log-uniform" and not lu.keeps_distribution
    assert sum(lu.probability(k) for k in range(9)) == pytest.approx(1.0)
    assert lu.probability(0) > lu.probability(1) > lu.probability(8)
    ws = roam.Sampler.weighted([1, 0, 3], first=5, stride=10, scheme="preloc", group_draws=8)
    assert (ws.distribution, ws.first, ws.stride, ws.count, ws.group_draws) == (
        "weighted", 5, 10, 3, 8)
    assert [ws.probability(k) for k in (5, 15, 25)] == [0.25, 0.0, 0.75]
    assert "Sampler.weighted(<3 weights>, first=5" in repr(ws)
    # Weights from any 1-D array of numbers.
    for weights in (np.array([1, 2], np.int32), np.array([1.0, 2.0], np.float32), (1, 2)):
        assert roam.Sampler.weighted(weights).probability(1) == pytest.approx(2 / 3)
    assert roam.Sampler.uniform(0, 5).scheme == "naive"
    with roam.Node(10, 1, samplers=[s := roam.Sampler.uniform(0, 10, scheme="local")],
                   sampling_seed=3) as node:
        assert node.sampling_seed == 3
        [registered] = node.samplers
        assert repr(registered) == repr(s)


def test_weighted_draws_follow_the_weights():
    samplers = [roam.Sampler.weighted([0, 1, 0, 3], first=4)]
    with roam.Node(10, 1, samplers=samplers) as node:
        w = node.worker(0)
        sample = w.prepare_sample(0, 8000)
        keys, _ = w.pull_sample(sample)
        assert set(keys.tolist()) == {5, 7}, "zero weights are never drawn"
        share = np.mean(keys == 7)
        assert 0.72 < share < 0.78, share


def test_partial_samples_and_finish():
    with roam.Node(10, 2, samplers=[roam.Sampler.uniform(0, 10)]) as node:
        w = node.worker(0)
        sample = w.prepare_sample(0, 5)
        keys, vals = w.pull_sample(sample, 2)
        assert keys.shape == (2,) and vals.shape == (2, 2)
        assert "3 of 5 left" in repr(sample)
        assert w.finish_sample(sample) == 3
        assert sample.remaining == 0 and "finished, 3 unused" in repr(sample)
        # An empty pull and an empty sample are fine.
        empty = w.prepare_sample(0, 0)
        keys, vals = w.pull_sample(empty)
        assert keys.shape == (0,) and vals.shape == (0, 2)
        assert w.finish_sample(empty) == 0
        # A sample dropped without finish_sample is simply gone; the worker goes on.
        w.prepare_sample(0, 3)
        gc.collect()
        assert w.finish_sample(w.prepare_sample(0, 2)) == 2


def test_sampling_seed_makes_draws_reproducible():
    def draws(seed):
        with roam.Node(1000, 1, samplers=[roam.Sampler.uniform(0, 1000)],
                       sampling_seed=seed) as node:
            w = node.worker(0)
            sample = w.prepare_sample(0, 50)
            return w.pull_sample(sample)[0].tolist()

    assert draws(5) == draws(5)
    assert draws(5) != draws(6)


def test_per_key_lengths_and_sparse_keys():
    # Per-key lengths: a sampler's keys must share one length, which shapes the values.
    lens = [1] * 10 + [3] * 10
    with roam.Node(value_lengths=lens, samplers=[roam.Sampler.uniform(10, 10)]) as node:
        w = node.worker(0)
        keys, vals = w.pull_sample(w.prepare_sample(0, 4))
        assert vals.shape == (4, 3) and all(10 <= k < 20 for k in keys)
    with roam.Node(value_lengths=2, sparse_keys=True,
                   samplers=[roam.Sampler.uniform(2**63, 100, stride=2**40)]) as node:
        w = node.worker(0)
        keys, vals = w.pull_sample(w.prepare_sample(0, 4))
        assert all((int(k) - 2**63) % 2**40 == 0 for k in keys) and not vals.any()


def test_workers_sample_concurrently():
    samplers = [roam.Sampler.uniform(0, 64, scheme="pool:8", group_draws=16),
                roam.Sampler.uniform(0, 64, scheme="naive")]
    with roam.Node(64, 2, workers=2, allocation="dynamic", samplers=samplers) as node:
        set_keys = np.arange(64, dtype=np.uint64)
        node.worker(0).set(set_keys, np.repeat(set_keys.astype(np.float32), 2)).wait()
        errors = []

        def run(i):
            try:
                w = node.worker(i)
                for step in range(100):
                    with w.prepare_sample(step % 2, 8) as sample:
                        keys, vals = w.pull_sample(sample)
                    assert np.array_equal(vals[:, 0], keys.astype(np.float32))
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors


# ---- bad input raises a Python exception naming the culprit ----


def test_bad_samplers():
    with pytest.raises(ValueError, match="unknown sampling scheme \"pool\""):
        roam.Sampler.uniform(0, 10, scheme="pool")
    with pytest.raises(ValueError, match="unknown sampling scheme \"pool:0\""):
        roam.Sampler.uniform(0, 10, scheme="pool:0")
    with pytest.raises(ValueError, match="unknown sampling scheme \"fast\""):
        roam.Sampler.weighted([1.0], scheme="fast")
    with pytest.raises(ValueError, match="^Sampler.uniform: the support is empty$"):
        roam.Sampler.uniform(0, 0)
    with pytest.raises(ValueError, match="^Sampler.log_uniform: the support's stride is 0$"):
        roam.Sampler.log_uniform(0, 5, stride=0)
    with pytest.raises(ValueError, match="overflows the key type"):
        roam.Sampler.uniform(2**64 - 3, 2, stride=4)
    with pytest.raises(ValueError, match="^first must be non-negative, not -1$"):
        roam.Sampler.uniform(-1, 5)
    with pytest.raises(ValueError, match="^count must be non-negative, not -5$"):
        roam.Sampler.uniform(0, -5)
    with pytest.raises(ValueError, match="weight 1 is -1; weights must be finite and non-negative"):
        roam.Sampler.weighted([1.0, -1.0])
    with pytest.raises(ValueError, match="weight 2 is NaN"):
        roam.Sampler.weighted([1.0, 2.0, float("nan")])
    with pytest.raises(ValueError, match="weight 0 is inf"):
        roam.Sampler.weighted([float("inf")])
    with pytest.raises(ValueError, match="the weights sum to zero"):
        roam.Sampler.weighted([0, 0])
    with pytest.raises(ValueError, match="^Sampler.weighted: the support is empty$"):
        roam.Sampler.weighted([])
    with pytest.raises(TypeError, match="weights must be a 1-D .* not a 2-D one"):
        roam.Sampler.weighted([[1.0, 2.0]])
    with pytest.raises(TypeError, match="weights must be a 1-D .*, not str"):
        roam.Sampler.weighted("12")
    with pytest.raises(TypeError, match="weights must be a 1-D sequence or array of numbers: "):
        roam.Sampler.weighted(["a", "b"])
    with pytest.raises(ValueError, match="group_draws must be at least 1"):
        roam.Sampler.uniform(0, 10, group_draws=0)
    with pytest.raises(ValueError, match="a pool group .* is too large"):
        roam.Sampler.uniform(0, 10, scheme="pool:100000")


def test_bad_sampler_registration():
    with pytest.raises(
        ValueError,
        match=r"^samplers\[1\] = Sampler.uniform\(90, 20, stride=1, scheme=\"naive\", "
        r"with_replacement=True\): sampled key 109 is outside the key space of 100 keys$",
    ):
        roam.Node(100, 1, samplers=[roam.Sampler.uniform(0, 10), roam.Sampler.uniform(90, 20)])
    with pytest.raises(
        ValueError,
        match=r"^samplers\[0\] = .*: sampled keys must have one value length: key 2 has 2, "
        r"key 0 has 1$",
    ):
        roam.Node(value_lengths=[1, 1, 2], samplers=[roam.Sampler.log_uniform(0, 3)])
    with pytest.raises(TypeError, match=r"^samplers\[1\] must be a roam.Sampler, not int$"):
        roam.Node(10, 1, samplers=[roam.Sampler.uniform(0, 10), 3])
    with pytest.raises(TypeError, match="wrap a single one in a list"):
        roam.Node(10, 1, samplers=roam.Sampler.uniform(0, 10))
    with pytest.raises(TypeError, match="samplers must be a list of roam.Sampler"):
        roam.Node(10, 1, samplers=5)


def test_bad_sampling_calls():
    samplers = [roam.Sampler.uniform(0, 10, scheme="preloc"),
                roam.Sampler.weighted([1, 0, 1], with_replacement=False)]
    with roam.Node(10, 2, workers=2, samplers=samplers) as node:
        w, other = node.worker(0), node.worker(1)
        with pytest.raises(roam.AccessError, match=r"^no sampler 2: 2 registered"):
            w.prepare_sample(2, 1)
        with pytest.raises(roam.AccessError, match=r"^no sampler -1: 2 registered"):
            w.prepare_sample(-1, 1)
        with pytest.raises(ValueError, match="^n must be non-negative, not -3$"):
            w.prepare_sample(0, -3)
        with pytest.raises(
            roam.AccessError,
            match="^3 distinct samples asked for; the distribution draws 2 keys$",
        ):
            w.prepare_sample(1, 3)
        with pytest.raises(ValueError, match="draws them all at prepare_sample"):
            w.prepare_sample(0, 2**40)
        sample = w.prepare_sample(0, 4)
        w.pull_sample(sample, 3)
        with pytest.raises(roam.AccessError, match="^asked for 2 samples, the handle has 1 left$"):
            w.pull_sample(sample, 2)
        with pytest.raises(ValueError, match="^n must be non-negative, not -1$"):
            w.pull_sample(sample, -1)
        with pytest.raises(ValueError, match="prepared by worker 0 of node 0; use that worker"):
            other.pull_sample(sample, 1)
        with pytest.raises(ValueError, match="prepared by worker 0"):
            other.finish_sample(sample)
        assert sample.remaining == 1, "refused calls change nothing"
        assert w.finish_sample(sample) == 1
        with pytest.raises(ValueError, match="already finished"):
            w.pull_sample(sample, 1)
        with pytest.raises(ValueError, match="already finished"):
            w.finish_sample(sample)
        with pytest.raises(TypeError):
            w.pull_sample("not a sample", 1)
        # Without replacement, all reachable keys can be drawn (and only those).
        keys, _ = w.pull_sample(w.prepare_sample(1, 2))
        assert sorted(keys.tolist()) == [0, 2]
        live = w.prepare_sample(0, 2)
    with pytest.raises(roam.OpError, match="shut down"):
        w.prepare_sample(0, 1)
    with pytest.raises(roam.OpError, match="shut down"):
        w.pull_sample(live, 1)
    assert w.finish_sample(live) == 2


def test_node_without_samplers():
    with roam.Node(10, 1) as node:
        assert node.samplers == [] and node.sampling_seed == 0
        with pytest.raises(roam.AccessError, match="no sampler 0: 0 registered"):
            node.worker(0).prepare_sample(0, 1)
