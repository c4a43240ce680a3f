"""Server-side optimizers: `Node(optimizer=...)` and `Worker.push_gradients` on one in-process
node, checked against plain numpy loops of the same arithmetic; the optimizer state stays hidden
(pulls return the visible values) and survives a checkpoint."""

import numpy as np
import pytest

import roam

KEYS, LEN = 20, 3


def u64(*keys):
    return np.array(keys, dtype=np.uint64)


def reference(kind, params, grads):
    """The documented update rules (docs/embeddings.md), in float32 like roam."""
    f = np.float32
    w = np.zeros(LEN, f)
    a = np.zeros(LEN, f)
    b = np.zeros(LEN, f)
    for t, g in enumerate(grads, start=1):
        g = g.astype(f)
        if kind == "sgd":
            w -= f(params["lr"]) * g
        elif kind == "adagrad":
            a += g * g
            w -= f(params["lr"]) * g / np.sqrt(a + f(params.get("eps", 1e-6)))
        elif kind == "adam":
            b1, b2 = f(params.get("beta1", 0.9)), f(params.get("beta2", 0.999))
            eps = f(params.get("eps", 1e-8))
            a = b1 * a + (f(1) - b1) * g
            b = b2 * b + (f(1) - b2) * g * g
            m_hat = a / (f(1) - b1**t)
            v_hat = b / (f(1) - b2**t)
            w -= f(params["lr"]) * m_hat / (np.sqrt(v_hat) + eps)
        elif kind == "ftrl":
            alpha, beta = f(params["alpha"]), f(params.get("beta", 1.0))
            l1, l2 = f(params.get("l1", 0.0)), f(params.get("l2", 0.0))
            n_new = b + g * g
            sigma = (np.sqrt(n_new) - np.sqrt(b)) / alpha
            a += g - sigma * w
            b = n_new
            w = np.where(
                np.abs(a) <= l1,
                f(0),
                -(a - np.sign(a) * l1) / ((beta + np.sqrt(b)) / alpha + l2),
            ).astype(f)
    return w


CASES = [
    ("sgd", {"lr": 0.5}),
    ("adagrad", {"lr": 0.1}),
    ("adam", {"lr": 0.05}),
    ("ftrl", {"alpha": 0.1, "l1": 0.01, "l2": 0.1}),
]


@pytest.mark.parametrize("kind,params", CASES)
def test_push_gradients_matches_the_update_rule(kind, params):
    seed = 7
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    grads = rng.uniform(-2, 2, size=(15, KEYS, LEN)).astype(np.float32)
    with roam.Node(num_keys=KEYS, value_lengths=LEN, workers=1,
                   optimizer={"kind": kind, **params}) as node:
        w = node.worker(0)
        keys = np.arange(KEYS, dtype=np.uint64)
        for step in grads:
            w.push_gradients(keys, step.reshape(-1)).wait()
        got = w.pull(keys).wait()
        assert got.shape == (KEYS, LEN), "pulls return the visible values only"
    for k in range(KEYS):
        want = reference(kind, params, grads[:, k, :])
        np.testing.assert_allclose(got[k], want, rtol=2e-5, atol=1e-6,
                                   err_msg=f"{kind} key {k}")


def test_push_gradient_sums_steps_like_the_gradients_it_sums():
    """An aggregate of one gradient is that gradient's step, bit for bit; an aggregate of n
    equal gradients leaves Adagrad's accumulator where n steps leave it (the next step of
    that size is as small as after n steps) and moves the row about as far."""
    g = np.full(LEN, 0.5, np.float32)
    with roam.Node(num_keys=KEYS, value_lengths=LEN, workers=1,
                   optimizer={"kind": "adagrad", "lr": 0.1}) as node:
        w = node.worker(0)
        w.push_gradients(u64(0), g).wait()
        w.push_gradient_sums(u64(1), np.concatenate([g, g * g])).wait()
        one, agg = w.pull(u64(0, 1)).wait()
        np.testing.assert_array_equal(one, agg)
        n = 16
        for _ in range(n):
            w.push_gradients(u64(2), g).wait()
        w.push_gradient_sums(u64(3), np.concatenate([n * g, n * g * g])).wait()
        w.push_gradients(u64(4), n * g).wait()
        steps, aggregate, summed = w.pull(u64(2, 3, 4)).wait()
        np.testing.assert_allclose(aggregate, steps, rtol=0.03)
        assert np.all(np.abs(summed) < 0.3 * np.abs(steps)), "one step of the sum moves less"
        before = w.pull(u64(2, 3)).wait()
        w.push_gradients(u64(2, 3), np.concatenate([g, g])).wait()
        moved = w.pull(u64(2, 3)).wait() - before
        np.testing.assert_allclose(moved[1], moved[0], rtol=1e-5)
        with pytest.raises(roam.AccessError, match="buffer holds 3 values .* 6 values"):
            w.push_gradient_sums(u64(5), np.ones(LEN, np.float32))


def test_a_name_selects_the_defaults_and_state_survives_a_checkpoint(tmp_path):
    ckpt = tmp_path / "ckpt"
    g = np.ones(LEN, np.float32)
    with roam.Node(num_keys=KEYS, value_lengths=LEN, workers=1, optimizer="adagrad") as node:
        w = node.worker(0)
        w.push_gradients(u64(4), g).wait()
        first = w.pull(u64(4)).wait()
        assert first.shape == (1, LEN), "a pull returns the visible values only"
        w.checkpoint(str(ckpt))
    with roam.Node(num_keys=KEYS, value_lengths=LEN, workers=1, optimizer="adagrad",
                   restore_from=str(ckpt)) as node:
        w = node.worker(0)
        np.testing.assert_array_equal(w.pull(u64(4)).wait(), first)
        w.push_gradients(u64(4), g).wait()
        # Adagrad (lr 0.01, defaults): the second step divides by sqrt(2 + eps), not sqrt(1 + eps),
        # which it does only if the accumulator came back with the checkpoint.
        want = first - np.float32(0.01) / np.sqrt(np.float32(2) + np.float32(1e-6))
        np.testing.assert_allclose(w.pull(u64(4)).wait(), want, rtol=1e-6)


def test_bad_optimizer_settings_and_missing_optimizer_raise():
    with pytest.raises(ValueError, match="unknown optimizer \"rmsprop\""):
        roam.Node(num_keys=4, value_lengths=1, optimizer="rmsprop")
    with pytest.raises(ValueError, match="beta2 = 1.5"):
        roam.Node(num_keys=4, value_lengths=1, optimizer={"kind": "adam", "beta2": 1.5})
    with pytest.raises(ValueError, match="unknown optimizer parameter \"momentum\""):
        roam.Node(num_keys=4, value_lengths=1, optimizer={"kind": "sgd", "momentum": 0.9})
    with pytest.raises(ValueError, match="needs a \"kind\""):
        roam.Node(num_keys=4, value_lengths=1, optimizer={"lr": 0.1})
    with pytest.raises(TypeError):
        roam.Node(num_keys=4, value_lengths=1, optimizer=3)
    with roam.Node(num_keys=4, value_lengths=1, workers=1) as node:
        with pytest.raises(roam.AccessError, match="needs an optimizer"):
            node.worker(0).push_gradients(u64(1), np.ones(1, np.float32))
