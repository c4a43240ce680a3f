#!/usr/bin/env bash
# Checkpoint and restore speed beside dd on the same disk (docs/benchmarks.md, "Checkpoints").
#   scripts/checkpoint-speed.sh DIR [RUNS] [KEYS] [VALUE_LEN] [RANKS]
# Per run: dd writes a file of the table's size (bs=4M, conv=fsync) and reads it back, then the
# checkpoint_speed example checkpoints a table of KEYS × VALUE_LEN floats (default 4 Mi × 64:
# 1 GiB) and restores it into one node, then into each rank of RANKS nodes (default 4). The
# page cache is synced and dropped before every read (needs root), so reads hit the disk.
# Prints each run's JSON, then medians and ranges.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/checkpoint-speed.sh DIR [RUNS] [KEYS] [VALUE_LEN] [RANKS]}
runs=${2:-3}
keys=${3:-4194304}
len=${4:-64}
ranks=${5:-4}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}
# CHECKPOINT_SPEED_BIN: another build of the example (e.g. of an older commit, to compare).
bin=${CHECKPOINT_SPEED_BIN:-target/release/examples/checkpoint_speed}
[ -n "${CHECKPOINT_SPEED_BIN:-}" ] || cargo build --release -q -p roam --example checkpoint_speed
bytes=$((keys * len * 4))
mb=$((bytes / 4194304))
out=$(mktemp)
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
for run in $(seq "$runs"); do
  rm -rf "$dir/ckpt" "$dir/dd.bin"
  mkdir -p "$dir/ckpt"
  drop
  w=$( { /usr/bin/time -f %e dd if=/dev/zero of="$dir/dd.bin" bs=4M count="$mb" conv=fsync status=none; } 2>&1 )
  drop
  r=$( { /usr/bin/time -f %e dd if="$dir/dd.bin" of=/dev/null bs=4M status=none; } 2>&1 )
  rm -f "$dir/dd.bin"
  drop
  # The last line is the measurement (a node prints its statistics when it shuts down).
  json=$("$bin" "$dir/ckpt" "$keys" "$len" --drop-caches --ranks "$ranks" | tail -1)
  echo "run $run: dd write ${w}s read ${r}s; $json"
  echo "{\"dd_write_s\": $w, \"dd_read_s\": $r, \"roam\": $json}" >>"$out"
done
rm -rf "$dir/ckpt"
python3 - "$out" "$bytes" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
mb = int(sys.argv[2]) / 1e6
def show(name, values):
    print(f"{name}: median {statistics.median(values):.0f} MB/s (range {min(values):.0f}-{max(values):.0f}, {len(values)} runs)")
show("dd write (conv=fsync)", [mb / r["dd_write_s"] for r in runs])
show("checkpoint", [r["roam"]["checkpoint_mb_s"] for r in runs])
show("dd read", [mb / r["dd_read_s"] for r in runs])
show("restore into 1 node", [r["roam"]["restore_mb_s"] for r in runs])
def secs(name, key):
    values = [r["roam"][key] for r in runs if r["roam"].get(key) is not None]
    if values:
        print(f"{name}: median {statistics.median(values):.2f} s (range {min(values):.2f}-{max(values):.2f})")
secs("restore into 1 node, CPU (user + system)", "restore_cpu_s")
secs("fresh memory of the table's size, written once", "fresh_memory_s")
ranks = [k for r in runs for k in r["roam"]["ranks"]]
if ranks:
    n = len(runs[0]["roam"]["ranks"])
    share = statistics.median(k["bytes_read"] for k in ranks) / (mb * 1e6)
    print(f"restore into one rank of {n}: median {statistics.median(k['restore_s'] for k in ranks):.2f} s, "
          f"reads {share:.1%} of the table (median over ranks and runs; 1/{n} = {1/n:.1%})")
PY
rm -f "$out"
