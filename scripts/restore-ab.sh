#!/usr/bin/env bash
# A/B of restore speed between builds of the checkpoint_speed example (docs/reliability.md,
# "Speed"), alternated round by round so that the disk's and the machine's drift hits every
# build alike:
#   scripts/restore-ab.sh DIR ROUNDS NAME=[ENV=VALUE,...]:BINARY ...
# e.g. scripts/restore-ab.sh target/ckab 5 main=:/tmp/ckspeed-main hp=:target/release/examples/checkpoint_speed \
#        off=ROAM_HUGE_PAGES=off:target/release/examples/checkpoint_speed
# DIR/ckpt must hold a checkpoint of a 4 Mi × 64 table (the first build writes one if not).
# Per round and build: sync and drop the page cache (needs root), `dd` the shard to /dev/null
# (bs=4M: the disk's sequential read just before), then the build's restore-only run (it drops
# the cache again). Prints every measurement as JSON, then per build the medians and ranges of
# wall time, CPU time (user + system) and restore/dd (dd's time over the restore's).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/restore-ab.sh DIR ROUNDS NAME=[ENV=VALUE,...]:BINARY ...}
rounds=${2:?rounds}
shift 2
[ $# -gt 0 ] || { echo "no builds given" >&2; exit 2; }
keys=4194304
len=64
if ! [ -f "$dir/ckpt/manifest.json" ]; then
  rm -rf "$dir/ckpt"
  mkdir -p "$dir/ckpt"
  first=${1#*:}
  "$first" "$dir/ckpt" "$keys" "$len" >/dev/null
fi
shard=$(ls "$dir"/ckpt/ckpt-*.safetensors)
out=$(mktemp)
for round in $(seq "$rounds"); do
  for build in "$@"; do
    name=${build%%=*}
    rest=${build#*=}
    envs=${rest%%:*}
    bin=${rest#*:}
    sync
    echo 3 >/proc/sys/vm/drop_caches
    d=$( { /usr/bin/time -f %e dd if="$shard" of=/dev/null bs=4M status=none; } 2>&1 )
    # shellcheck disable=SC2086 # ENV=VALUE pairs, split on commas.
    j=$(env ${envs//,/ } "$bin" "$dir/ckpt" "$keys" "$len" --restore-only --no-empty-start \
      --drop-caches --ranks 0 | tail -1)
    line="{\"round\": $round, \"build\": \"$name\", \"dd_read_s\": $d, \"load\": $(cut -d' ' -f1 /proc/loadavg), \"roam\": $j}"
    echo "$line"
    echo "$line" >>"$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
builds = list(dict.fromkeys(r["build"] for r in rows))
def show(values, fmt):
    return f"{fmt.format(st.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"
for b in builds:
    rs = [r for r in rows if r["build"] == b]
    wall = [r["roam"]["restore_s"] for r in rs]
    cpu = [r["roam"]["restore_cpu_s"] for r in rs]
    dd = [r["dd_read_s"] for r in rs]
    ratio = [100 * r["dd_read_s"] / r["roam"]["restore_s"] for r in rs]
    load = [r["load"] for r in rs]
    print(f"{b}: {len(rs)} rounds; restore wall {show(wall, '{:.2f}')} s, CPU {show(cpu, '{:.2f}')} s; "
          f"dd read {show(dd, '{:.2f}')} s; restore/dd {show(ratio, '{:.0f}')} %; "
          f"load {min(load)}-{max(load)}")
PY
rm -f "$out"
