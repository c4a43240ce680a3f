#!/usr/bin/env bash
# A/B of a change by instruction counts, which unlike wall or CPU time do not move with the
# load of a shared VM: runs the same `roam launch` job under callgrind with an old and a new
# `roam` binary (every node process is traced) and prints, per binary, the instructions of
# each node and of the functions named by --functions (inclusive, the row of each function's
# own source file in callgrind_annotate: code inlined from other files is listed apart and
# left out), summed over the nodes.
#
# Usage: scripts/ab-callgrind.sh OLD_ROAM NEW_ROAM [--nodes N] [--functions 'RE'] -- ARGS...
#   ARGS are the node command's arguments after the binary, e.g.
#   scripts/ab-callgrind.sh /tmp/roam-old target/release/roam -- train kge --mode lapse \
#       --synthetic entities=5000,relations=50,triples=10000,seed=1 --eval-every 0 \
#       --eval-max 50 --epochs 1
# Multi-process runs are not deterministic (which keys move when depends on timing), so read
# differences of a few percent in the totals as noise; per-function counts per call are what
# a change of code moves. Needs valgrind (scripts/apt-install.sh valgrind).
set -euo pipefail
usage="usage: scripts/ab-callgrind.sh OLD_ROAM NEW_ROAM [--nodes N] [--functions RE] -- ARGS..."
[[ $# -ge 3 ]] || { echo "$usage" >&2; exit 2; }
old=$1 new=$2
shift 2
nodes=2
functions='Epoch::run|release_now|handle_transfer|read_frame|poll_transmit'
while [[ $# -gt 0 && $1 != -- ]]; do
    case $1 in
        --nodes) nodes=$2; shift 2 ;;
        --functions) functions=$2; shift 2 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
done
[[ ${1:-} == -- ]] || { echo "$usage" >&2; exit 2; }
shift
command -v valgrind >/dev/null || scripts/apt-install.sh valgrind
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for side in old new; do
    bin=${!side}
    [[ -x $bin ]] || { echo "not an executable: $bin" >&2; exit 2; }
    valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$out/$side.%p" \
        "$bin" launch --nodes "$nodes" -- "$bin" "$@" >"$out/$side.log" 2>&1 ||
        { echo "$side run failed; its output:" >&2; tail -20 "$out/$side.log" >&2; exit 1; }
done
python3 - "$out" "$functions" <<'EOF'
import glob, re, subprocess, sys
out, functions = sys.argv[1], re.compile(sys.argv[2])
def profile(path):
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", path],
                          capture_output=True, text=True, check=True).stdout
    total, funcs, cmd = 0, {}, ""
    for line in text.splitlines():
        if line.startswith("Profiled target:"):
            cmd = line
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)", line)
        if not m:
            continue
        n, name = int(m.group(1).replace(",", "")), m.group(2)
        if "PROGRAM TOTALS" in name:
            total = n
            continue
        fn = re.sub(r" \[.*\]$", "", name.split(":", 1)[-1])
        if functions.search(fn) and "[" in name:  # the function's own entry, not inlined parts
            funcs[fn] = funcs.get(fn, 0) + n
    return cmd, total, funcs
rows = {}
for side in ("old", "new"):
    nodes = [p for p in sorted(glob.glob(f"{out}/{side}.*")) if not p.endswith(".log")]
    profiles = [profile(p) for p in nodes]
    # The launcher is the process that traced no node command (`train`, `bench`, ...).
    profiles = [p for p in profiles if " launch " not in p[0]]
    rows[side] = profiles
    print(f"{side}: " + ", ".join(f"node {i}: {t:,}" for i, (_, t, _) in enumerate(profiles)))
def summed(side):
    acc = {}
    for _, _, funcs in rows[side]:
        for k, v in funcs.items():
            acc[k] = acc.get(k, 0) + v
    return acc
old, new = summed("old"), summed("new")
tot_old = sum(t for _, t, _ in rows["old"])
tot_new = sum(t for _, t, _ in rows["new"])
print(f"{'':60} {'old':>15} {'new':>15} {'new/old':>8}")
print(f"{'all node processes':60} {tot_old:>15,} {tot_new:>15,} {tot_new / tot_old:>8.3f}")
for k in sorted(set(old) | set(new), key=lambda k: -old.get(k, 0)):
    o, n = old.get(k, 0), new.get(k, 0)
    ratio = f"{n / o:.3f}" if o else "-"
    print(f"{k[-60:]:60} {o:>15,} {n:>15,} {ratio:>8}")
EOF
