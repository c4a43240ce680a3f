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
    with roam.Node(num_keys=NUM_KEYS, value_lengths=DIM, workers=1) as node:
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
        stop.set()
        spinner.join()
        latency_s = int(os.environ["ROAM_EMULATE_LATENCY_US"]) / 1e6
        assert elapsed >= 1.5 * latency_s, (elapsed, latency_s)
        assert during > 1000, f"the spinning thread ran only {during} times during the wait"
        assert np.all(out == 0)

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


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode.startswith("basic-"):
        basic(mode.removeprefix("basic-"))
    elif mode == "exact-sums":
        exact_sums()
    elif mode == "latency":
        latency()
    elif mode == "peer-gone":
        peer_gone()
    else:
        raise SystemExit(f"unknown mode {mode}")
