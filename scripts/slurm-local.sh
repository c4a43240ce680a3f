#!/usr/bin/env bash
# A single-host Slurm cluster for tests and trials: `scripts/slurm-local.sh start DIR` writes a
# slurm.conf for this machine under DIR, starts munged, slurmctld and slurmd (root), and waits
# until the node accepts jobs; `scripts/slurm-local.sh stop DIR` stops the daemons it started.
# Afterwards `SLURM_CONF=DIR/slurm.conf srun -n 3 ...` runs tasks here. Needs the Debian
# packages slurm-wlm and munge (scripts/cluster-tools.sh installs them).
#
# The node is declared with 8 CPUs whatever the machine has (`SlurmdParameters=config_overrides`),
# so that a 3- or 4-task job fits on a 2-core VM: these are test jobs, not a scheduling policy.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
conf=$dir/slurm.conf

# Stops each daemon and waits (bounded) until it is gone, so that DIR can be removed after.
stop() {
    local pidfile pid
    for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
        [ -s "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            [ -d "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || break
            sleep 0.1
        done
        rm -f "$pidfile"
    done
}

case $cmd in
stop)
    stop
    exit 0
    ;;
start) ;;
*) usage ;;
esac

if [ "$(id -u)" -ne 0 ]; then
    echo "slurm-local: starting slurmctld and slurmd needs root" >&2
    exit 1
fi
for tool in slurmctld slurmd munged srun; do
    command -v "$tool" >/dev/null || {
        echo "slurm-local: $tool is missing; run scripts/cluster-tools.sh install" >&2
        exit 1
    }
done

host=$(hostname -s)
mkdir -p "$dir/state" "$dir/spool" "$dir/munge" "$dir/log"
cat >"$conf" <<CONF
ClusterName=roam-local
SlurmctldHost=$host
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF

# munge: a key of our own, so that the system's key and daemon are left alone.
key=$dir/munge/munge.key
[ -s "$key" ] || dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
chmod 400 "$key"
socket=$dir/munge/munge.socket
munged --key-file="$key" --socket="$socket" --pid-file="$dir/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed" --force
# Slurm finds munged through the socket named in its auth options.
sed -i "s#^AuthType=auth/munge#AuthType=auth/munge\nAuthInfo=socket=$socket#" "$conf"
trap 'stop' ERR

export SLURM_CONF=$conf
slurmctld -f "$conf"
slurmd -f "$conf"

# Ready when the node is idle (slurmd registered); bounded, with the logs on failure.
for _ in $(seq 1 100); do
    state=$(sinfo -h -N -o '%T' 2>/dev/null | head -n1 || true)
    case $state in
    idle*|mix*|alloc*) echo "slurm-local: node $host is $state (SLURM_CONF=$conf)"; exit 0 ;;
    esac
    sleep 0.2
done
echo "slurm-local: the node did not become idle within 20 s (last state: ${state:-none})" >&2
tail -n 20 "$dir"/log/*.log >&2 || true
stop
exit 1
