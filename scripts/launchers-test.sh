#!/usr/bin/env bash
# Launches real training jobs with the launchers clusters already have, on this machine, and
# checks their reports against a single-node run of the same job:
#   - Open MPI: `mpirun -n 3 --oversubscribe roam train mf --mode lapse`
#   - Slurm:    `srun -n 3 roam train kge --mode lapse` on a single-host Slurm cluster
#               (scripts/slurm-local.sh; needs root)
# Rank, node count and coordinator come from each launcher's own environment (OMPI_COMM_WORLD_*,
# SLURM_PROCID/SLURM_NTASKS) plus the documented coordinator convention MASTER_ADDR/MASTER_PORT
# and ROAM_CLUSTER_TOKEN (docs/launching.md). Installs openmpi-bin, slurm-wlm and munge when
# missing (scripts/apt-install.sh). Part of scripts/test.sh.
#
# Environment: ROAM_BIN (default target/release/roam, built by scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
roam=${ROAM_BIN:-$PWD/target/release/roam}
[ -x "$roam" ] || { echo "launchers-test: $roam not built (cargo build --release -p roam-cli)" >&2; exit 1; }

scripts/apt-install.sh openmpi-bin slurm-wlm munge
tmp=$(mktemp -d /tmp/roam-launchers.XXXXXX)
slurm_dir=$tmp/slurm
cleanup() {
    scripts/slurm-local.sh stop "$slurm_dir" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

# The report of the run whose stdout is in FILES (rank 0 prints it), checked against single's.
check() { # label app epochs single_file files...
    python3 - "$@" <<'PY'
import json, math, sys
label, app, epochs, single_file, *files = sys.argv[1:]
epochs = int(epochs)

def report(path):
    with open(path) as f:
        found = [json.loads(l) for l in f if l.startswith('{"app"')]
    return found

single = report(single_file)
assert len(single) == 1, f"{label}: the reference run printed {len(single)} reports"
reports = [r for path in files for r in report(path)]
assert len(reports) == 1, f"{label}: expected one report (rank 0's) in {files}, found {len(reports)}"
r, s = reports[0], single[0]
assert r["app"] == app and r["mode"] == "lapse", f"{label}: report of {r['app']} {r['mode']}"
assert r["nodes"] == 3, f"{label}: the job ran on {r['nodes']} nodes, not 3"
assert len(r["epochs"]) == epochs, f"{label}: {len(r['epochs'])} epochs, not {epochs}"
last, single_last = r["epochs"][-1], s["epochs"][-1]
if app == "mf":
    got, want = last["test_rmse"], single_last["test_rmse"]
    ok = math.isfinite(got) and abs(got - want) <= 0.05 * want
    what = "test RMSE"
    against = "single"
else:
    # The default synthetic graph's training stalls in about half the runs, even on one node
    # (docs/workloads-kge.md): after 2 epochs runs ended at MRR 0.02-0.31. So the reference is
    # the untrained model (--eta 0, MRR 0.0044): the job must have learned (the worst run seen
    # was 4.3x it), and its loss must have fallen.
    got, want = last["mrr"], single_last["mrr"]
    falling = r["epochs"][-1]["loss"] < r["epochs"][0]["loss"]
    ok = math.isfinite(got) and got >= 2 * want and falling
    what, against = "MRR", "untrained"
assert ok, f"{label}: {what} {got:.4f} against {against} {want:.4f}"
print(f"launchers-test: {label}: 3 nodes, {epochs} epochs, {what} {got:.4f} ({against} {want:.4f})")
PY
}

# Open MPI (as root it needs the two ALLOW variables; harmless otherwise).
mf_args=(train mf --mode lapse --json --epochs 10)
"$roam" "${mf_args[@]}" >"$tmp/mf-single.out" 2>/dev/null
port=$(free_port)
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    timeout 300 mpirun -n 3 --oversubscribe \
    -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" -x ROAM_CLUSTER_TOKEN="$token" \
    --output-filename "$tmp/mpi" "$roam" "${mf_args[@]}" >/dev/null 2>"$tmp/mpirun.err" \
    || { tail -n 20 "$tmp/mpirun.err" >&2; exit 1; }
check "mpirun -n 3 (mf)" mf 10 "$tmp/mf-single.out" "$tmp"/mpi/1/rank.*/stdout

# Slurm: a single-host cluster of our own (root only).
if [ "$(id -u)" -ne 0 ]; then
    echo "launchers-test: skipping Slurm: starting slurmctld and slurmd needs root" >&2
    exit 0
fi
kge_args=(train kge --mode lapse --json --epochs 2)
"$roam" train kge --mode single --json --epochs 1 --eta 0 >"$tmp/kge-untrained.out" 2>/dev/null
scripts/slurm-local.sh start "$slurm_dir"
port=$(free_port)
SLURM_CONF=$slurm_dir/slurm.conf timeout 300 srun -n 3 \
    --export=ALL,MASTER_ADDR=127.0.0.1,MASTER_PORT="$port",ROAM_CLUSTER_TOKEN="$token" \
    -o "$tmp/srun-%t.out" -e "$tmp/srun-%t.err" "$roam" "${kge_args[@]}" \
    || { tail -n 20 "$tmp"/srun-*.err >&2; exit 1; }
check "srun -n 3 (kge)" kge 2 "$tmp/kge-untrained.out" "$tmp"/srun-*.out
