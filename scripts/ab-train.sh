#!/usr/bin/env bash
# A/B of a change on a whole training run: builds OLD_REV (in .ab-target/, reused across
# runs) and the working tree (release), then runs scripts/ab-train.py with the two builds
# alternately: medians and ranges of training CPU per epoch summed over nodes, epoch time,
# bytes, local fraction and quality, and the ratios new/old.
#
# Usage: scripts/ab-train.sh OLD_REV [--reps N] [--nodes N] [--profile P] -- APP TRAIN_ARGS...
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
    echo "usage: scripts/ab-train.sh OLD_REV [options] -- APP TRAIN_ARGS..." >&2
    exit 2
fi
old_rev=$(git rev-parse --verify "$1^{commit}") || { echo "ab-train: no commit $1" >&2; exit 2; }
shift
repo=$PWD
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --detach --quiet "$work/old" "$old_rev"
echo "ab-train: building old ($old_rev) and new (working tree)" >&2
(cd "$work/old" && CARGO_TARGET_DIR="$repo/.ab-target" cargo build --quiet --release -p roam-cli --bin roam)
cp "$repo/.ab-target/release/roam" "$work/roam-old"
cargo build --quiet --release -p roam-cli --bin roam
python3 scripts/ab-train.py "$work/roam-old" "$repo/target/release/roam" "$@"
