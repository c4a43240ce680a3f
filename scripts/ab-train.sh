#!/usr/bin/env bash
# A/B of a change on a whole training run: builds OLD_REV (in .ab-target/, reused across
# runs) and the working tree (release), then runs scripts/ab-train.py with the two builds
# alternately: medians and ranges of training CPU per epoch summed over nodes, epoch time,
# bytes, local fraction and quality, and the ratios new/old.
#
# Usage: scripts/ab-train.sh OLD_REV [--reps N] [--nodes N] [--profile P] -- APP TRAIN_ARGS...
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ab-build.sh
ab_build "scripts/ab-train.sh OLD_REV [options] -- APP TRAIN_ARGS..." "$@"
shift
python3 scripts/ab-train.py "$roam_old" "$roam_new" "$@"
