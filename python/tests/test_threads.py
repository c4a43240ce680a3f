"""Worker threads run concurrently: the GIL is released while roam blocks or works."""

import faulthandler
import threading
import time

import numpy as np
import pytest

import roam


@pytest.fixture(autouse=True)
def no_hang():
    """Turns a deadlock (e.g. a wait holding the GIL) into a failure with tracebacks."""
    faulthandler.dump_traceback_later(60, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def test_barrier_needs_both_threads_inside_roam_at_once():
    # A barrier completes only when both workers are inside it at the same time: if a blocked
    # wait kept the GIL, the second thread could never enter and this would hang.
    with roam.Node(num_keys=64, value_lengths=8, workers=2) as node:
        errors = []

        def run(i):
            try:
                w = node.worker(i)
                for round in range(20):
                    w.push(np.arange(64, dtype=np.uint64), np.ones(512, np.float32)).wait()
                    w.barrier()
                    out = w.pull(np.arange(64, dtype=np.uint64)).wait()
                    assert np.all(out == 2 * (round + 1)), out
                    w.barrier()
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors


def test_python_runs_while_a_worker_waits():
    # Worker 0 blocks in a barrier for as long as worker 1 stays away; meanwhile the main thread
    # keeps running Python code, which needs the GIL.
    with roam.Node(num_keys=8, value_lengths=1, workers=2) as node:
        w0, w1 = node.worker(0), node.worker(1)
        entered = threading.Event()
        done = threading.Event()

        def blocked():
            entered.set()
            w0.barrier()
            done.set()

        t = threading.Thread(target=blocked)
        t.start()
        entered.wait()
        count = 0
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            count += 1
        assert count > 1000
        assert not done.is_set()  # still waiting: it really blocked
        w1.barrier()
        t.join(10)
        assert done.is_set()


def test_large_pulls_overlap_in_time():
    # Two threads each pull a large batch into their own array many times. With the GIL
    # released during the copy, the threads' time inside roam overlaps.
    n, dim = 1 << 15, 64
    with roam.Node(num_keys=n, value_lengths=dim, workers=2) as node:
        keys = np.arange(n, dtype=np.uint64)
        spans = [[], []]
        start = threading.Barrier(2)

        def run(i):
            w = node.worker(i)
            out = np.empty((n, dim), np.float32)
            start.wait()
            for _ in range(15):
                t0 = time.perf_counter()
                w.pull(keys, out).wait()
                spans[i].append((t0, time.perf_counter()))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        overlap = sum(
            max(0.0, min(a1, b1) - max(a0, b0)) for a0, a1 in spans[0] for b0, b1 in spans[1]
        )
        total = sum(b - a for a, b in spans[0])
        # Serialised by a lock there would be no overlap at all.
        assert overlap > 0.1 * total, (overlap, total)


def test_one_worker_shared_by_threads_is_serialised_not_broken():
    # Using one worker from several threads is not the intended pattern, but it must be safe.
    with roam.Node(num_keys=16, value_lengths=4) as node:
        w = node.worker(0)

        def run():
            for _ in range(200):
                w.push(np.arange(16, dtype=np.uint64), np.ones(64, np.float32))
            w.wait_all()

        threads = [threading.Thread(target=run) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        w.wait_all()
        assert np.all(w.pull(np.arange(16, dtype=np.uint64)).wait() == 800)
