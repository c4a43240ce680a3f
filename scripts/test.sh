#!/usr/bin/env bash
# The project's test command (README "Tests"): everything CI runs besides fmt and clippy.
set -euo pipefail
cd "$(dirname "$0")/.."
# The metrics test runs a real Prometheus server and promtool (Debian's prometheus).
./scripts/setup-prometheus.sh
cargo build --release -p roam-cli --bin roam
cargo test --workspace --release
# Real jobs under mpirun and srun (installs openmpi-bin, slurm-wlm and munge when missing).
./scripts/launchers-test.sh
