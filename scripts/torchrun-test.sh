#!/usr/bin/env bash
# Runs the Python KGE example under torchrun, the way PyTorch users launch jobs:
#   torchrun --nproc-per-node 2 examples/python/kge.py --epochs 2
# Each torchrun process is one roam node (rank and size from RANK/WORLD_SIZE, the coordinator at
# MASTER_ADDR:MASTER_PORT+1, since torchrun's agent holds MASTER_PORT; docs/launching.md); the
# gradients come from torch autograd. Checks the example's final line: 2 nodes, MRR >= 0.3.
#
# CI runs it from scripts/python-test.sh, in that script's venv (ROAM_TORCH_VENV). Alone it
# makes its own venv in $CARGO_TARGET_DIR/torch-venv (kept for reruns): PyTorch's Linux wheel
# on PyPI pulls in its CUDA libraries, 5.3 GB installed, about a minute here.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-$PWD/target}
case $target in /*) ;; *) target=$PWD/$target ;; esac
venv=${ROAM_TORCH_VENV:-$target/torch-venv}
python=${PYTHON:-python3}

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
export PATH="$venv/bin:$PATH" PIP_DISABLE_PIP_VERSION_CHECK=1
"$venv/bin/python" -m pip install --quiet "maturin>=1.9.4,<2" "numpy>=1.26" torch
"$venv/bin/python" -m pip install --quiet --no-build-isolation --no-deps --force-reinstall ./python

out=$(mktemp)
trap 'rm -f "$out"' EXIT
ROAM_CLUSTER_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n') \
    timeout 600 "$venv/bin/torchrun" --nproc-per-node 2 examples/python/kge.py --epochs 2 --backend torch \
    >"$out"
"$venv/bin/python" - "$out" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"app"')]
assert len(lines) == 1, f"expected one summary line (rank 0's), found {len(lines)}"
s = lines[0]
assert s["nodes"] == 2 and s["backend"] == "torch", s
assert s["mrr"] >= 0.3, f"MRR {s['mrr']:.3f} after 2 epochs"
print(f"torchrun-test: 2 nodes x {s['workers_per_node']} workers, torch backend, MRR {s['mrr']:.3f}")
PY
