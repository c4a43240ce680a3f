#!/usr/bin/env bash
# The Python package's tests: builds and installs `roam` (python/, the PyO3 extension in
# crates/roam-py) into a virtual environment under the Cargo target directory, builds the `roam`
# launcher for the multi-process tests, then runs pytest on python/tests. Extra arguments go to
# pytest (e.g. `scripts/python-test.sh -k threads`).
#
# Environment: PYTHON (interpreter for the venv, default python3, >= 3.11), ROAM_PY_VENV (venv
# path, default $CARGO_TARGET_DIR/py-venv), CARGO_TARGET_DIR (default target/), ROAM_PY_TORCH
# (default 1: install PyTorch; 0: leave it out, and the tests that need it are skipped).
# PyTorch comes from PyPI, whose Linux wheel pulls in its CUDA libraries (5.3 GB installed, about
# a minute here; roam uses torch on the CPU only). With it installed the torch tests must run
# (ROAM_REQUIRE_TORCH=1 makes conftest.py import it, so a broken install fails rather than
# skips), and, for the whole suite, the KGE example then runs under `torchrun --nproc-per-node 2`
# (scripts/torchrun-test.sh, in the same venv).
# `safetensors` (small, with a numpy API) is installed so test_checkpoint_tables.py opens a
# checkpoint without roam, as a user would.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
venv=${ROAM_PY_VENV:-$target/py-venv}
python=${PYTHON:-python3}

start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
    echo "python-test: creating $venv"
    "$python" -m venv "$venv"
fi
export PATH="$venv/bin:$PATH"
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install --quiet "maturin>=1.9.4,<2" "numpy>=1.26" "pytest>=8" \
    "safetensors>=0.4" \
    "pyyaml>=6" "kubernetes-validate>=1.30"
if [ "${ROAM_PY_TORCH:-1}" != 0 ]; then
    echo "python-test: installing PyTorch"
    python -m pip install --quiet "torch>=2.1"
    export ROAM_REQUIRE_TORCH=1
fi

echo "python-test: building the roam launcher"
cargo build --release -p roam-cli --bin roam
echo "python-test: building and installing the roam Python package"
# In-tree build with the venv's maturin; the extension shares the workspace's target directory.
python -m pip install --quiet --no-build-isolation --no-deps --force-reinstall ./python

export ROAM_BIN="$target/release/roam"
echo "python-test: running pytest (setup took $(( $(date +%s) - start )) s)"
# From the repository root: `import roam` must find the installed package, not python/roam.
python -m pytest -q -p no:cacheprovider python/tests "$@" --rootdir python -c python/pyproject.toml
# The whole suite only (not a `-k` selection): the KGE example under torchrun.
if [ "${ROAM_PY_TORCH:-1}" != 0 ] && [ $# -eq 0 ]; then
    ROAM_TORCH_VENV="$venv" ./scripts/torchrun-test.sh
fi
