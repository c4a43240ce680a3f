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
if [ $# -lt 1 ]; then
    echo "usage: scripts/ab-bench.sh OLD_REV [--reps N] [--seconds S] [--out FILE.json]" >&2
    exit 2
fi
old_rev=$(git rev-parse --verify "$1^{commit}") || { echo "ab-bench: no commit $1" >&2; exit 2; }
shift
repo=$PWD
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --detach --quiet "$work/old" "$old_rev"
echo "ab-bench: building old ($old_rev) and new (working tree)" >&2
(cd "$work/old" && CARGO_TARGET_DIR="$repo/.ab-target" cargo build --quiet --release -p roam-cli --bin roam)
cp "$repo/.ab-target/release/roam" "$work/roam-old"
cargo build --quiet --release -p roam-cli --bin roam
python3 scripts/bench-ops.py --ab "$work/roam-old" "$repo/target/release/roam" "$@"
