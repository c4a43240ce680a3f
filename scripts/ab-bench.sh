#!/usr/bin/env bash
# A/B benchmark of a change: builds OLD_REV and the working tree (release), then runs
# `roam bench ops` in the Lapse target configuration (2 nodes x 1 worker, 100k keys x 10
# floats, batch 100) with the two builds alternately and prints medians, ranges and new/old
# ratios (scripts/bench-ops.py --ab). Wall times on shared VMs are noisy: run it on a quiet
# machine, with several repetitions, and read the ranges.
#
# Usage: scripts/ab-bench.sh OLD_REV [--reps N] [--seconds S] [--out FILE.json]
# The old build lives in its own target directory (.ab-target/, reused across runs).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ab-build.sh
ab_build "scripts/ab-bench.sh OLD_REV [--reps N] [--seconds S] [--out FILE.json]" "$@"
shift
python3 scripts/bench-ops.py --ab "$roam_old" "$roam_new" "$@"
