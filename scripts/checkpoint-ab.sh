#!/usr/bin/env bash
# A/B of checkpoint and restore speed between builds of the checkpoint_speed example
# (docs/benchmarks.md, "Checkpoints and restore"), alternated run by run so that the disk's and
# the machine's drift hits every build alike:
#   scripts/checkpoint-ab.sh DIR ROUNDS NAME=BINARY ...
# Per round and build: one run of scripts/checkpoint-speed.sh (dd write and read of a file of
# the table's size, then the build's checkpoint of a 1 GiB table and its restore into one node,
# page cache dropped before every read). Prints every run, then per build the medians and
# ranges of checkpoint/dd-write and restore/dd-read (each run's own dd).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/checkpoint-ab.sh DIR ROUNDS NAME=BINARY ...}
rounds=${2:?rounds}
shift 2
[ $# -gt 0 ] || { echo "no builds given" >&2; exit 2; }
out=$(mktemp)
for round in $(seq "$rounds"); do
  for build in "$@"; do
    name=${build%%=*}
    bin=${build#*=}
    line=$(CHECKPOINT_SPEED_BIN=$bin scripts/checkpoint-speed.sh "$dir" 1 4194304 64 0 | grep '^run 1:')
    echo "$name: $line"
    echo "$name ${line#run 1: }" >>"$out"
  done
done
python3 - "$out" <<'PY'
import json, re, statistics as st, sys
rows = {}
for line in open(sys.argv[1]):
    name, rest = line.split(" ", 1)
    m = re.match(r"dd write ([\d.]+)s read ([\d.]+)s; (.*)", rest.strip())
    w, r, j = float(m[1]), float(m[2]), json.loads(m[3])
    rows.setdefault(name, []).append((w / j["checkpoint_s"], r / j["restore_s"],
                                      j["checkpoint_s"], j["restore_s"], j["restore_cpu_s"]))
def show(v, pct=False):
    f = (lambda x: f"{100 * x:.0f} %") if pct else (lambda x: f"{x:.2f} s")
    return f"{f(st.median(v))} ({f(min(v))}-{f(max(v))})"
for name, v in rows.items():
    cols = list(zip(*v))
    print(f"{name}: {len(v)} rounds; checkpoint/dd-write {show(cols[0], True)}, checkpoint "
          f"{show(cols[2])}; restore/dd-read {show(cols[1], True)}, restore {show(cols[3])}, "
          f"restore CPU {show(cols[4])}")
PY
rm -f "$out"
