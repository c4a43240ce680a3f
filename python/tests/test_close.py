"""A worker whose thread is done is retired with ``worker.close()`` (or a ``with`` block), as a
dropped Rust ``Worker`` is: its siblings' barriers no longer wait for it.

Without it, a program whose second worker thread has finished hangs in worker 0's next
barrier, silently. Each scenario runs in a subprocess with a timeout, so a hang fails the test
(naming the scenario) instead of hanging the suite.
"""

import re
import subprocess
import sys
import textwrap
import threading

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


def test_a_waiting_barrier_names_the_missing_worker_and_repeats():
    # Worker 1 stays away until the parent has seen two warnings naming it (read from the
    # child's stderr), then arrives: the warnings come from the barrier's own timer, with no
    # sleep on either side.
    code = textwrap.dedent(
        """
        import sys, threading
        import roam
        with roam.Node(num_keys=4, value_lengths=1, workers=2, barrier_warning=0.2) as node:
            def late():
                sys.stdin.readline()
                with node.worker(1) as w:
                    w.barrier()
            t = threading.Thread(target=late)
            t.start()
            with node.worker(0) as w:
                w.barrier()
            t.join()
        print("done", flush=True)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    timer = threading.Timer(HANG_S, child.kill)
    timer.start()
    try:
        seen = []
        for line in child.stderr:
            if "still waiting for worker 1 of node 0" in line:
                seen.append(line.strip())
                if len(seen) == 2:
                    break
        assert len(seen) == 2, f"warnings seen before the child ended: {seen}"
        # Repeated: a later warning reports a longer wait (multiples of 200 ms; a timer thread
        # woken late reports the intervals passed at once).
        waited = [waited_ms(line) for line in seen]
        assert all(round(w) % 200 == 0 for w in waited) and 200 <= waited[0] < waited[1], seen
        child.stdin.write("\n")
        child.stdin.flush()
        out, err = child.communicate()
    finally:
        timer.cancel()
    assert child.returncode == 0 and "done" in out, f"exit {child.returncode}\n{out}\n{err}"


def waited_ms(line: str) -> float:
    """The wait a barrier warning reports (Rust's Duration format: 200ms, 1s, 1.2s), in ms."""
    m = re.search(r"waited ([0-9.]+)(ms|s);", line)
    assert m, line
    return float(m.group(1)) * (1 if m.group(2) == "ms" else 1000)


def test_barrier_warning_must_be_positive():
    with pytest.raises(ValueError, match="barrier_warning"):
        roam.Node(num_keys=4, value_lengths=1, barrier_warning=0)
