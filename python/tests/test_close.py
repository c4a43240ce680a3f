"""A worker whose thread is done is retired with ``worker.close()`` (or a ``with`` block), as a
dropped Rust ``Worker`` is: its siblings' barriers no longer wait for it.

Without it, a program whose second worker thread has finished hangs in worker 0's next
barrier, silently. Each scenario runs in a subprocess with a timeout, so a hang fails the test
(naming the scenario) instead of hanging the suite.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import roam

# Far above the scenarios' run time (well under a second each); reaching it means a hang.
HANG_S = 120


def run_scenario(name: str, body: str) -> str:
    code = "import threading\nimport numpy as np\nimport roam\n" + textwrap.dedent(body)
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_S
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{name}: hung (no exit in {HANG_S} s); output so far: {e.stdout!r} {e.stderr!r}")
    assert done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_a_closed_workers_siblings_pass_later_barriers():
    out = run_scenario(
        "close() of a finished thread's worker",
        """
        with roam.Node(num_keys=8, value_lengths=1, workers=2) as node:
            def second():
                w = node.worker(1)
                w.push(np.arange(8, dtype=np.uint64), np.ones(8, np.float32)).wait()
                w.barrier()
                w.close()
            t = threading.Thread(target=second)
            t.start()
            w0 = node.worker(0)
            w0.barrier()
            t.join()
            # Worker 1 is gone: these complete with worker 0 alone.
            w0.barrier()
            out = w0.pull(np.arange(8, dtype=np.uint64)).wait()
            w0.barrier()
            print("sum", float(out.sum()))
        """,
    )
    assert "sum 8.0" in out, out


def test_a_with_block_closes_the_worker_also_when_it_raises():
    out = run_scenario(
        "a worker thread that raises inside its with block",
        """
        errors = []
        with roam.Node(num_keys=8, value_lengths=1, workers=3) as node:
            def failing():
                try:
                    with node.worker(1) as w:
                        w.barrier()
                        raise ValueError("bad batch")
                except ValueError as e:
                    errors.append(e)
            def finishing():
                with node.worker(2) as w:
                    w.barrier()
                    w.push(np.arange(8, dtype=np.uint64), np.ones(8, np.float32))
            threads = [threading.Thread(target=f) for f in (failing, finishing)]
            for t in threads:
                t.start()
            w0 = node.worker(0)
            w0.barrier()
            # Blocks until workers 1 and 2 are retired (their pushes applied), then passes.
            w0.barrier()
            out = w0.pull(np.arange(8, dtype=np.uint64)).wait()
            for t in threads:
                t.join()
            print("errors", [str(e) for e in errors], "sum", float(out.sum()))
        """,
    )
    assert "errors ['bad batch'] sum 8.0" in out, out


def test_a_closed_worker_refuses_operations_and_closes_once():
    with roam.Node(num_keys=4, value_lengths=1, workers=1) as node:
        w = node.worker(0)
        assert not w.closed
        t = w.push(np.arange(4, dtype=np.uint64), np.ones(4, np.float32))
        w.close()
        assert w.closed
        assert t.wait() is None  # completed by close
        w.close()  # again: nothing
        for call in (
            lambda: w.pull(np.arange(4, dtype=np.uint64)),
            lambda: w.push(np.arange(4, dtype=np.uint64), np.ones(4, np.float32)),
            w.barrier,
            w.current_clock,
        ):
            with pytest.raises(roam.OpError, match="closed"):
                call()
        # The same (closed) object comes back.
        assert node.worker(0).closed
