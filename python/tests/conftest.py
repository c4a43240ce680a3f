"""Shared helpers of the roam Python test suite."""

import os
import pathlib
import shutil

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

if os.environ.get("ROAM_REQUIRE_TORCH") == "1":
    # scripts/python-test.sh installed PyTorch: its tests must run, and a torch that does not
    # import fails the session here instead of skipping them one by one.
    import torch  # noqa: F401


def roam_binary() -> str | None:
    """The `roam` launcher: $ROAM_BIN, else the workspace's release build, else PATH."""
    explicit = os.environ.get("ROAM_BIN")
    if explicit:
        return explicit
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if not target.is_absolute():
        target = REPO / target
    built = target / "release" / "roam"
    if built.exists():
        return str(built)
    return shutil.which("roam")


@pytest.fixture
def roam_bin() -> str:
    path = roam_binary()
    if path is None:
        pytest.skip("the roam binary is not built (cargo build --release -p roam-cli)")
    return path


@pytest.fixture(autouse=True)
def single_node_env(monkeypatch):
    """Tests in this process run single nodes: no cluster settings from the environment."""
    for var in (
        "ROAM_RANK",
        "ROAM_NUM_NODES",
        "ROAM_COORDINATOR",
        "ROAM_WORKERS_PER_NODE",
        "ROAM_EMULATE_LATENCY_US",
        "ROAM_METRICS_ADDR",
        "ROAM_METRICS_HOLD",
        "RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
    ):
        monkeypatch.delenv(var, raising=False)
