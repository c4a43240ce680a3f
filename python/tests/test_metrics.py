"""The Prometheus endpoint from Python: ``Node(metrics_addr=...)`` and ``ROAM_METRICS_ADDR``.

Every scrape is a real HTTP GET with a timeout; the endpoint is bound before ``Node(...)``
returns, so nothing waits on luck.
"""

import re
import socket
import urllib.request

import numpy as np
import pytest

import roam


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(addr: str) -> str:
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=20) as response:
        assert response.status == 200
        return response.read().decode()


def sample(body: str, series: str) -> float:
    """The value of one sample line, e.g. ``roam_nodes{rank="0"}``."""
    match = re.search(rf"^{re.escape(series)} (\S+)$", body, re.MULTILINE)
    assert match, f"no {series} in:\n{body}"
    return float(match.group(1))


def work(node: roam.Node) -> None:
    w = node.worker(0)
    keys = np.array([1, 2, 3], dtype=np.uint64)
    w.push(keys, np.ones((3, 2), dtype=np.float32))
    w.pull(keys)


def test_metrics_addr_argument_serves_prometheus_text():
    addr = f"127.0.0.1:{free_port()}"
    with roam.Node(num_keys=10, value_lengths=2, metrics_addr=addr) as node:
        assert node.metrics_addr == addr
        work(node)
        body = scrape(addr)
        assert sample(body, 'roam_nodes{rank="0"}') == 1
        assert sample(body, 'roam_ops_total{rank="0",op="pull",path="local"}') >= 1
        assert sample(body, 'roam_ops_total{rank="0",op="push",path="local"}') >= 1
    # Gone with the node.
    assert node.metrics_addr is None
    with pytest.raises(OSError):
        scrape(addr)


def test_roam_metrics_addr_is_honoured_when_the_argument_is_not_given(monkeypatch):
    addr = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("ROAM_METRICS_ADDR", addr)
    with roam.Node(num_keys=10, value_lengths=2) as node:
        assert node.metrics_addr == addr
        assert sample(scrape(addr), 'roam_workers{rank="0"}') == 1
    # The argument wins over the environment.
    other = f"127.0.0.1:{free_port()}"
    with roam.Node(num_keys=10, value_lengths=2, metrics_addr=other) as node:
        assert node.metrics_addr == other


def test_no_endpoint_by_default():
    with roam.Node(num_keys=10, value_lengths=2) as node:
        assert node.metrics_addr is None


def test_addresses_that_cannot_be_served_fail_the_start_naming_them():
    with pytest.raises(roam.StartError, match=r"127\.0\.0\.1:0.*port 0 is not allowed"):
        roam.Node(num_keys=10, value_lengths=2, metrics_addr="127.0.0.1:0")
    with pytest.raises(roam.StartError, match=r"no port.*HOST:PORT"):
        roam.Node(num_keys=10, value_lengths=2, metrics_addr="no port")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        addr = "127.0.0.1:%d" % taken.getsockname()[1]
        with pytest.raises(roam.StartError, match=rf"{re.escape(addr)}: cannot listen"):
            roam.Node(num_keys=10, value_lengths=2, metrics_addr=addr)
