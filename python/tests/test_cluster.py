"""Multi-process runs: `roam launch --nodes 2 -- python cluster_job.py MODE`."""

import pathlib
import subprocess
import sys

import pytest

JOB = pathlib.Path(__file__).with_name("cluster_job.py")


def launch(roam_bin, mode, *extra, timeout=120):
    cmd = [roam_bin, "launch", "--nodes", "2", *extra, "--", sys.executable, str(JOB), mode]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{output}"
    return output


@pytest.mark.parametrize("allocation", ["dynamic", "static-range", "static-hash"])
def test_two_nodes_two_workers(roam_bin, allocation):
    out = launch(roam_bin, f"basic-{allocation}", "--workers-per-node", "2")
    for rank in (0, 1):
        assert f"[node {rank}] OK basic-{allocation} rank {rank}" in out, out
        # Each node left cleanly and printed its counters.
        assert f'[node {rank}] {{"roam_node_stats"' in out, out


@pytest.mark.parametrize("allocation", ["static-range", "dynamic"])
def test_sampling_on_two_nodes(roam_bin, allocation):
    out = launch(roam_bin, f"sampling-{allocation}", "--workers-per-node", "2")
    for rank in (0, 1):
        assert f"[node {rank}] OK sampling-{allocation} rank {rank}" in out, out
    assert "panicked" not in out, out


def test_exact_sums_with_relocations(roam_bin):
    out = launch(roam_bin, "exact-sums", "--workers-per-node", "2")
    for rank in (0, 1):
        assert f"[node {rank}] OK exact-sums rank {rank}" in out, out


def test_gil_released_during_remote_wait(roam_bin):
    out = launch(roam_bin, "latency", "--latency-us", "50000")
    for rank in (0, 1):
        assert f"[node {rank}] OK latency rank {rank}" in out, out


def test_peer_loss_raises_peer_gone_error(roam_bin):
    out = launch(roam_bin, "peer-gone")
    assert "[node 0] OK peer-gone rank 0: PeerGoneError" in out, out
    assert "panicked" not in out and "Traceback" not in out, out


@pytest.mark.parametrize("allocation", ["static-range", "static-hash", "dynamic"])
def test_a_drained_node_hands_over_its_keys_and_leaves(roam_bin, allocation):
    out = launch(roam_bin, f"drain-{allocation}")
    for rank in (0, 1):
        assert f"[node {rank}] OK drain rank {rank}" in out, out
    assert "panicked" not in out and "Traceback" not in out, out


@pytest.mark.parametrize("variant", ["dynamic", "immediate", "static-range"])
def test_intents_bring_the_other_nodes_keys_here(roam_bin, variant):
    out = launch(roam_bin, f"intent-{variant}")
    for rank in (0, 1):
        assert f"[node {rank}] OK intent-{variant} rank {rank}" in out, out
    assert "panicked" not in out and "Traceback" not in out, out


@pytest.mark.parametrize("techniques", ["all", "replicate-only", "relocate-only"])
def test_keys_two_nodes_want_at_once_are_replicated_and_flushed(roam_bin, techniques):
    out = launch(roam_bin, f"shared-{techniques}")
    for rank in (0, 1):
        assert f"[node {rank}] OK shared-{techniques} rank {rank}" in out, out
    assert "panicked" not in out and "Traceback" not in out, out
