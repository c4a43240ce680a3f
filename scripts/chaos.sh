#!/usr/bin/env bash
# The chaos test at a larger size than CI's (crates/roam-cli/tests/chaos.rs): MF and KGE on 3
# nodes under `roam launch --max-restarts`, several kill -9 per run, and repeated SIGSTOP and
# network-partition runs (the partition runs need root and network namespaces; skipped
# otherwise). Prints every run's seed, then the detection times per fault kind (median and max,
# in ms: from the fault to the launcher's notice of the first node that ended).
#
# Usage: scripts/chaos.sh [RUNS] [KILLS] [EPOCHS]   (default 5 runs, 3 kills, 10 epochs)
# Replay one test's faults: ROAM_CHAOS_SEED=S scripts/chaos.sh 1 ...
# Peer timeout of the SIGSTOP and partition runs: 1 s, or ROAM_CHAOS_PEER_TIMEOUT=SECONDS
# (`default`: the nodes' default, 5 s), e.g. ROAM_CHAOS_PEER_TIMEOUT=default scripts/chaos.sh 3
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
kills=${2:-3}
epochs=${3:-10}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
ROAM_CHAOS_RUNS=$runs ROAM_CHAOS_KILLS=$kills ROAM_CHAOS_EPOCHS=$epochs \
    cargo test --release -p roam-cli --test chaos -- --nocapture --test-threads 1 2>&1 | tee "$log"
echo
echo "chaos: detection times (ms) over $runs run(s) per test, $kills kill(s) per kill run:"
grep -o '^chaos-detect .*' "$log" | awk '
    { t[$2] = t[$2] " " $3 }
    END {
        for (k in t) {
            n = split(substr(t[k], 2), v, " ")
            # insertion sort: a few dozen values
            for (i = 2; i <= n; i++) { x = v[i] + 0; j = i - 1
                while (j > 0 && v[j] + 0 > x) { v[j + 1] = v[j]; j-- } v[j + 1] = x }
            med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
            printf "  %-10s n=%-3d median=%-8s max=%s\n", k, n, med, v[n]
        }
    }'
