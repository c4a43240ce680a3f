"""One node of a multi-process test, run by `roam launch --nodes 2 -- python cluster_job.py MODE`.

Prints `OK <mode> rank <r>` on success; any failure raises (non-zero exit).
"""

import gc
import os
import sys
import threading
import time

import numpy as np

import roam

NUM_KEYS = 200
DIM = 8


def basic(allocation: str) -> None:
    with roam.Node(num_keys=NUM_KEYS, value_lengths=DIM, allocation=allocation) as node:
        assert node.num_nodes == 2, node.num_nodes
        assert node.workers_per_node == 2, "roam launch --workers-per-node 2 sets it"
        total_workers = node.num_nodes * node.workers_per_node
        errors = []
        all_keys = np.arange(NUM_KEYS, dtype=np.uint64)

        def run(i: int) -> None:
            try:
                w = node.worker(i)
                g = w.global_id
                rng = np.random.default_rng(g)
                # Every worker adds 1 to every key: remote keys travel, local ones are copied.
                w.push(all_keys, np.ones(NUM_KEYS * DIM, np.float32)).wait()
                w.barrier()
                out = np.zeros((NUM_KEYS, DIM), np.float32)
                assert w.pull(all_keys, out).wait() is out  # zero-copy, remote keys too
                assert np.all(out == total_workers), out
                w.barrier()
                # Relocations interleaved with updates: no update lost or applied twice.
                pushes = 0
                tickets = []
                for step in range(30):
                    batch = rng.choice(NUM_KEYS, size=16, replace=False).astype(np.uint64)
                    if step % 3 == 0:
                        tickets.append(w.localize(batch))
                    tickets.append(w.push(batch, np.ones(16 * DIM, np.float32)))
                    pushes += 1
                for t in tickets:
                    t.wait()
                w.barrier()
                out = w.pull(all_keys).wait()
                assert out.shape == (NUM_KEYS, DIM)
                expected = NUM_KEYS * total_workers + total_workers * pushes * 16
                assert out[:, 0].sum() == expected, (out[:, 0].sum(), expected)
                assert np.all(out == out[:, :1]), "all values of a key got the same updates"
                # Localize a disjoint slice; then it is local.
                mine = np.arange(g, NUM_KEYS, total_workers, dtype=np.uint64)
                w.localize(mine).wait()
                buf = np.zeros(DIM, np.float32)
                local = [w.pull_if_local(int(k), buf) for k in mine]
                if allocation == "dynamic":
                    assert all(local), "localized keys are local"
                w.barrier()
            except BaseException as e:
                errors.append(e)
                raise

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        stats = node.stats()
        if allocation == "dynamic":
            assert stats["relocations_in"] > 0, stats
        else:
            assert stats["relocations_in"] == 0, stats
        assert stats["remote_pull_keys"] > 0, stats
    print(f"OK basic-{allocation} rank {node.rank}", flush=True)


def exact_sums() -> None:
    """Every worker pushes known amounts; the final values are checked exactly."""
    with roam.Node(num_keys=NUM_KEYS, value_lengths=1, allocation="dynamic") as node:
        total_workers = node.num_nodes * node.workers_per_node

        def run(i: int) -> None:
            w = node.worker(i)
            rng = np.random.default_rng(100 + w.global_id)
            for step in range(50):
                batch = rng.choice(NUM_KEYS, size=10, replace=False).astype(np.uint64)
                if step % 5 == 0:
                    w.localize(batch)  # ticket dropped: completed in the background
                # Every step adds global_id + 1 to every key, in two batches.
                rest = np.setdiff1d(np.arange(NUM_KEYS, dtype=np.uint64), batch)
                vals = np.full(NUM_KEYS - 10, w.global_id + 1, np.float32)
                w.push(batch, np.full(10, w.global_id + 1, np.float32))
                w.push(rest, vals)
            w.barrier()
            out = w.pull(np.arange(NUM_KEYS, dtype=np.uint64)).wait()
            expected = 50 * sum(g + 1 for g in range(total_workers))
            assert np.all(out == expected), (out.ravel()[:5], expected)
            w.barrier()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    print(f"OK exact-sums rank {node.rank}", flush=True)


def latency() -> None:
    """A remote pull under emulated latency: Python keeps running while the worker waits."""
    half = NUM_KEYS // 2
    halves = [roam.Sampler.uniform(0, half), roam.Sampler.uniform(half, half)]
    with roam.Node(num_keys=NUM_KEYS, value_lengths=DIM, workers=1, samplers=halves) as node:
        w = node.worker(0)
        # The keys of the other node (static-range allocation: node 0 holds the lower half).
        other = np.arange(NUM_KEYS, dtype=np.uint64)[
            (np.arange(NUM_KEYS) >= NUM_KEYS // 2) != (node.rank == 1)
        ]
        w.barrier()
        counter = [0]
        stop = threading.Event()

        def spin() -> None:
            while not stop.is_set():
                counter[0] += 1

        spinner = threading.Thread(target=spin)
        spinner.start()
        time.sleep(0.05)
        out = np.zeros((len(other), DIM), np.float32)
        before = counter[0]
        t0 = time.perf_counter()
        ticket = w.pull(other, out)
        assert w.wait(ticket) is out
        elapsed = time.perf_counter() - t0
        during = counter[0] - before
        # The same for a sample of the other node's keys (naive: an ordinary remote pull).
        sample = w.prepare_sample(1 - node.rank, 8)
        before = counter[0]
        t0 = time.perf_counter()
        keys, vals = w.pull_sample(sample)
        sample_elapsed = time.perf_counter() - t0
        sample_during = counter[0] - before
        stop.set()
        spinner.join()
        latency_s = int(os.environ["ROAM_EMULATE_LATENCY_US"]) / 1e6
        assert elapsed >= 1.5 * latency_s, (elapsed, latency_s)
        assert during > 1000, f"the spinning thread ran only {during} times during the wait"
        assert np.all(out == 0)
        assert all(int(k) in halves[1 - node.rank] for k in keys), keys
        assert vals.shape == (8, DIM) and not vals.any()
        assert sample_elapsed >= 1.5 * latency_s, (sample_elapsed, latency_s)
        assert sample_during > 1000, f"the spinner ran only {sample_during} times in pull_sample"

        # A pending pull pins its output: it cannot be resized; dropping the ticket and the
        # array is safe, and wait_all completes the pull into the (still alive) memory.
        w.set(other, np.ones(len(other) * DIM, np.float32)).wait()
        out2 = np.zeros((len(other), DIM), np.float32)
        ticket = w.pull(other, out2)
        assert not ticket.is_finished()
        # No other access may touch a pending pull's output.
        for attempt in (lambda: w.pull(other, out2), lambda: w.push(other, out2),
                        lambda: w.pull(other[:1], out2[0])):
            try:
                attempt()
            except ValueError as e:
                assert "pending pull" in str(e), e
            else:
                raise AssertionError("an access overlapping a pending pull's output was allowed")
        try:
            out2.resize((1,))
        except (ValueError, BufferError):
            pass
        else:
            raise AssertionError("a pending pull's output could be resized")
        view = out2[:1]  # keeps the memory reachable for the check below
        del ticket, out2
        gc.collect()
        w.wait_all()
        assert np.all(view == 1), view
        w.barrier()
    print(f"OK latency rank {node.rank} waited {elapsed * 1e3:.0f} ms, spinner ran {during}x", flush=True)


def sampling(allocation: str) -> None:
    """Every scheme on 2 nodes: sampled keys are in the support, their values are the ones set,
    pushes to them land, and `local` keeps to the node's keys when it holds some."""
    dim = 5  # column 0: the key's own number; column 1 + g: worker g's pushes to it
    half = NUM_KEYS // 2
    weights = np.arange(1, NUM_KEYS + 1, dtype=np.float64)
    samplers = [
        roam.Sampler.uniform(0, NUM_KEYS, scheme="naive"),  # 0
        roam.Sampler.uniform(0, NUM_KEYS, scheme="preloc"),  # 1
        roam.Sampler.uniform(0, NUM_KEYS, scheme="pool:4", group_draws=16),  # 2
        roam.Sampler.log_uniform(0, NUM_KEYS, scheme="pool:2:strict"),  # 3
        roam.Sampler.log_uniform(0, NUM_KEYS, scheme="local"),  # 4
        roam.Sampler.weighted(weights, scheme="local:next"),  # 5
        roam.Sampler.uniform(half, half, scheme="local"),  # 6: node 1's keys only
        roam.Sampler.uniform(0, half, stride=2, scheme="preloc", with_replacement=False),  # 7
    ]
    with roam.Node(num_keys=NUM_KEYS, value_lengths=dim, allocation=allocation,
                   samplers=samplers, sampling_seed=7) as node:
        assert [s.scheme for s in node.samplers] == [s.scheme for s in samplers]
        total_workers = node.num_nodes * node.workers_per_node
        assert 1 + total_workers <= dim
        all_keys = np.arange(NUM_KEYS, dtype=np.uint64)
        # Static range partitioning (and range homes): node r holds [r * half, (r + 1) * half)
        # until something moves.
        mine = range(node.rank * half, (node.rank + 1) * half)
        errors = []

        def draw(w, sampler, n, pushed):
            s = w.prepare_sample(sampler, n)
            keys1, vals1 = w.pull_sample(s, n // 2)
            keys2, vals2 = w.pull_sample(s)  # the rest
            assert w.finish_sample(s) == 0
            keys = np.concatenate([keys1, keys2])
            vals = np.concatenate([vals1, vals2])
            assert keys.dtype == np.uint64 and vals.dtype == np.float32
            assert vals.shape == (n, dim), vals.shape
            spec = samplers[sampler]
            assert all(int(k) in spec for k in keys), (sampler, keys)
            if not spec.with_replacement:
                assert len(set(keys.tolist())) == n, (sampler, keys)
            assert np.array_equal(vals[:, 0], keys.astype(np.float32)), (sampler, keys, vals)
            assert not vals[:, 1:].any(), "no pushes yet"
            for k in keys:
                pushed[int(k)] += 1
            return keys

        def run(i: int) -> None:
            try:
                w = node.worker(i)
                g = w.global_id
                if g == 0:
                    vals = np.zeros((NUM_KEYS, dim), np.float32)
                    vals[:, 0] = all_keys
                    w.set(all_keys, vals).wait()
                w.barrier()
                pushed = np.zeros(NUM_KEYS, np.int64)
                # Phase 1, nothing moves: `local` samples only keys this node holds.
                for sampler in (4, 5):
                    keys = draw(w, sampler, 30, pushed)
                    assert all(int(k) in mine for k in keys), (sampler, node.rank, keys)
                # Node 0 holds none of sampler 6's keys: its samples are read remotely.
                keys = draw(w, 6, 20, pushed)
                assert all(half <= k < NUM_KEYS for k in keys), keys
                w.barrier()
                # Phase 2: the exact schemes (keys may move under dynamic allocation).
                for sampler in (0, 1, 2, 3, 7):
                    draw(w, sampler, 40, pushed)
                w.barrier()
                # Pushes to sampled keys land: column 1 + g counts this worker's samples.
                sampled = np.flatnonzero(pushed).astype(np.uint64)
                update = np.zeros((len(sampled), dim), np.float32)
                update[:, 1 + g] = pushed[sampled]
                w.push(sampled, update).wait()
                w.barrier()
                out = w.pull(all_keys).wait()
                assert np.array_equal(out[:, 0], all_keys.astype(np.float32))
                assert np.array_equal(out[:, 1 + g], pushed.astype(np.float32)), g
                # Bad input on a live cluster raises, never panics.
                try:
                    w.prepare_sample(len(samplers), 1)
                except roam.AccessError as e:
                    assert f"no sampler {len(samplers)}" in str(e), e
                else:
                    raise AssertionError("an unknown sampler was accepted")
                w.barrier()
            except BaseException as e:
                errors.append(e)
                raise

        threads = [threading.Thread(target=run, args=(i,)) for i in range(node.workers_per_node)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        stats = node.stats()
        if allocation == "dynamic":
            assert stats["relocations_in"] + stats["relocations_out"] > 0, stats
    print(f"OK sampling-{allocation} rank {node.rank}", flush=True)


def peer_gone() -> None:
    """Node 1 dies; node 0's operation that needs it raises PeerGoneError (not a crash)."""
    node = roam.Node(num_keys=NUM_KEYS, value_lengths=DIM, workers=1, peer_timeout=2.0)
    w = node.worker(0)
    w.barrier()
    if node.rank == 1:
        sys.stdout.flush()
        os._exit(0)  # vanish without leaving the cluster
    time.sleep(0.5)
    remote = np.arange(NUM_KEYS // 2, NUM_KEYS, dtype=np.uint64)
    try:
        w.pull(remote).wait()
    except roam.PeerGoneError as e:
        assert "gone" in str(e), e
        print(f"OK peer-gone rank 0: {type(e).__name__}: {e}", flush=True)
    else:
        raise AssertionError("pull from a dead node succeeded")
    node.close()


def drain(allocation: str) -> None:
    """Both nodes push; node 0 then drains node 1, which waits for it and leaves; node 0 reads
    the exact sums, every key now its own."""
    node = roam.Node(num_keys=NUM_KEYS, value_lengths=1, workers=1, allocation=allocation)
    w = node.worker(0)
    keys = np.arange(NUM_KEYS, dtype=np.uint64)
    for step in range(20):
        if allocation == "dynamic" and step % 5 == node.rank:
            w.localize(keys[node.rank :: 2])
        w.push(keys, np.full(NUM_KEYS, node.rank + 1, np.float32))
    w.barrier()
    if node.rank == 1:
        node.wait_until_done()
        assert not node.is_member
        node.shutdown()
        print("OK drain rank 1", flush=True)
        return
    try:
        node.drain(0)
    except roam.OpError as e:
        assert "it is the coordinator" in str(e), e
    else:
        raise AssertionError("draining the coordinator succeeded")
    node.drain(1)
    out = w.pull(keys).wait()
    assert np.all(out == 20 * (1 + 2)), out.ravel()[:5]
    buf = np.zeros(1, np.float32)
    assert all(w.pull_if_local(int(k), buf) for k in keys), "every key is on node 0 now"
    assert node.is_member
    node.shutdown()
    print("OK drain rank 0", flush=True)


def intent(variant: str) -> None:
    """AdaPM intents on 2 nodes, one worker each: every worker signals intents for keys of
    the other node (range homes: node r holds [r * half, (r + 1) * half)) and ticks its clock
    past their start; under dynamic allocation the keys are then here with their values, under
    static allocation intents are only counted. `immediate` acts at the intent itself."""
    allocation = "static-range" if variant == "static-range" else "dynamic"
    timing = "immediate" if variant == "immediate" else "timed"
    half = NUM_KEYS // 2
    with roam.Node(num_keys=NUM_KEYS, value_lengths=DIM, workers=1, allocation=allocation,
                   intent_timing=timing) as node:
        w = node.worker(0)
        all_keys = np.arange(NUM_KEYS, dtype=np.uint64)
        if node.rank == 0:
            w.set(all_keys, np.repeat(all_keys.astype(np.float32), DIM)).wait()
        w.barrier()
        other = (1 - node.rank) * half
        far = np.arange(other, other + 20, dtype=np.uint64)  # a far-ahead intent
        near = np.arange(other + 20, other + 30, dtype=np.uint64)  # a few clocks ahead
        buf = np.zeros(DIM, np.float32)

        def local(keys) -> list[bool]:
            return [w.pull_if_local(int(k), buf) for k in keys]

        assert not any(local(far)) and not any(local(near)), "nothing moved yet"
        assert w.current_clock() == 0
        window = w.intent_window()
        if timing == "immediate":
            assert window == 2**64 - 1, window
        else:
            assert 0 < window < 2**32, window
        far_start = (1000 if timing == "immediate" else window) + 5  # beyond the window
        w.intent(far, far_start, far_start + 2)
        w.intent(near.tolist(), 3)  # a list of ints; end defaults to start + 1
        c = node.stats()
        assert (c["intents"], c["intent_keys"]) == (2, 30), c
        if allocation == "static-range":
            assert c["intent_actions"] == 0, c
        elif timing == "immediate":
            assert c["intent_actions"] == 30, "immediate acts on every intent at once"
        else:
            # The near intent starts within the window (not measured before the first tick):
            # acted on now; the far one waits in the queue until its start comes within it.
            assert c["intent_actions"] == 10, c
            assert not any(local(far)), "a far-ahead intent is not acted on yet"
        while w.current_clock() <= far_start:
            clock = w.current_clock()
            assert w.advance_clock() == clock + 1
        w.wait_all()  # the relocations the intents started are complete
        c = node.stats()
        assert (c["intents"], c["intent_keys"]) == (2, 30), c
        for name in ("late_intents", "intents_unchecked"):
            assert isinstance(c[name], int), c
        assert c["intents_unchecked"] == 0, c
        if allocation == "dynamic":
            assert c["intent_actions"] == 30, c
            assert all(local(far)) and all(local(near)), "intended keys are here"
            for k in np.concatenate([far, near]):
                assert w.pull_if_local(int(k), buf) and np.all(buf == float(k)), (k, buf)
            assert node.stats()["relocations_in"] >= 30, node.stats()
        else:
            assert c["intent_actions"] == 0 and c["late_intents"] == 0, c
            assert not any(local(far)) and not any(local(near)), "static keys never move"
        w.barrier()
        # The moved keys still hold their values and take updates, seen from both nodes.
        w.push(all_keys, np.ones(NUM_KEYS * DIM, np.float32)).wait()
        w.barrier()
        out = w.pull(all_keys).wait()
        assert np.array_equal(out[:, 0], all_keys.astype(np.float32) + 2), out[:, 0]
        w.barrier()
    print(f"OK intent-{variant} rank {node.rank}", flush=True)


def shared(techniques: str) -> None:
    """AdaPM's replication by intent on 2 nodes: node 0 wants its own first keys, then node 1
    wants them too over the same clocks. Under "all" and "replicate-only" node 0 keeps them and
    node 1 gets replicas (both read them locally, both push, every push counted once after the
    intents end and the replicas go); under "relocate-only" they move to node 1."""
    keys = np.arange(0, 8, dtype=np.uint64)  # homed and held on node 0 (range homes)
    with roam.Node(num_keys=NUM_KEYS, value_lengths=DIM, workers=1, allocation="dynamic",
                   intent_techniques=techniques, share_sync_every=0.001) as node:
        w = node.worker(0)
        buf = np.zeros(DIM, np.float32)
        if node.rank == 0:
            w.set(keys, np.ones(len(keys) * DIM, np.float32)).wait()
            w.intent(keys, 0, 50)  # within the window: node 0 wants them now
        w.barrier()
        if node.rank == 1:
            w.intent(keys, 0, 50)
            w.wait_all()  # the keys are here: replicas, or moved
        w.barrier()
        here = [w.pull_if_local(int(k), buf) for k in keys]
        stats = node.stats()
        if techniques == "relocate-only":
            assert all(here) == (node.rank == 1), (techniques, here)
            assert stats["share_grants"] == 0 and stats["shares_in"] == 0, stats
        else:
            assert all(here), (techniques, node.rank, here)
            if node.rank == 0:
                assert stats["share_grants"] == len(keys), stats
            else:
                assert (stats["shares_in"], stats["shared_replicas"]) == (len(keys), len(keys))
        w.push(keys, np.full(len(keys) * DIM, 2.0, np.float32)).wait()
        while w.current_clock() <= 50:
            w.advance_clock()  # past the intents' end: node 1's replicas flush and go
        w.barrier()
        stats = node.stats()
        assert stats["shared_replicas"] == 0, stats
        if node.rank == 1 and techniques != "relocate-only":
            assert stats["share_leaves"] == len(keys), stats
            assert not any(w.pull_if_local(int(k), buf) for k in keys), "replicas dropped"
        out = w.pull(keys).wait()
        assert np.all(out == 1.0 + 2.0 * 2), (node.rank, out.ravel()[:4])
        w.barrier()
    print(f"OK shared-{techniques} rank {node.rank}", flush=True)


def checkpoint_tables() -> None:
    """Two nodes with named tables write a checkpoint into $ROAM_TEST_CHECKPOINT/ckpt (one shard
    each); rank 0 saves what it pulls of every row to pulled.npz beside it, for the test to
    compare with the documented loader's reading (test_checkpoint_tables.py)."""
    out = os.environ["ROAM_TEST_CHECKPOINT"]
    tables = {
        "user": {"dim": 3, "num_ids": 40, "optimizer": {"kind": "adagrad", "lr": 0.1},
                 "initializer": {"kind": "uniform", "low": -0.5, "high": 0.5, "seed": 7}},
        "item": {"dim": 2, "dynamic": True, "optimizer": {"kind": "sgd", "lr": 0.5}},
    }
    users = np.arange(40, dtype=np.uint64)
    items = np.array([5, 2**33, 2**50 + 1, 77], dtype=np.uint64)
    with roam.Node(tables=tables) as node:
        w = node.worker(0)
        mine = users[node.rank :: node.num_nodes]
        grads = np.arange(len(mine) * 3, dtype=np.float32).reshape(-1, 3) - 4 * node.rank
        w.push_gradients(mine, grads, table="user").wait()
        w.push_gradients(items, np.full((4, 2), node.rank + 1, np.float32), table="item").wait()
        w.barrier()
        pulled_users = w.pull(users, table="user").wait()
        pulled_items = w.pull(items, table="item").wait()
        w.barrier()
        w.checkpoint(os.path.join(out, "ckpt"))
        if node.rank == 0:
            np.savez(os.path.join(out, "pulled.npz"), users=pulled_users, items=pulled_items)
        w.barrier()
    print(f"OK checkpoint-tables rank {node.rank}", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode.startswith("basic-"):
        basic(mode.removeprefix("basic-"))
    elif mode.startswith("sampling-"):
        sampling(mode.removeprefix("sampling-"))
    elif mode == "exact-sums":
        exact_sums()
    elif mode == "latency":
        latency()
    elif mode == "peer-gone":
        peer_gone()
    elif mode.startswith("intent-"):
        intent(mode.removeprefix("intent-"))
    elif mode.startswith("shared-"):
        shared(mode.removeprefix("shared-"))
    elif mode.startswith("drain-"):
        drain(mode.removeprefix("drain-"))
    elif mode == "checkpoint-tables":
        checkpoint_tables()
    else:
        raise SystemExit(f"unknown mode {mode}")
