#!/usr/bin/env bash
# Installs the Debian packages named on the command line that are not installed yet (the tests'
# system tools: Open MPI, Slurm, munge, Prometheus). Idempotent and quick when everything is
# present; runs `apt-get update` only when an install fails for want of package lists. Needs
# root (or sudo) and apt-get; says so, and which packages, when either is missing.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 PACKAGE..." >&2; exit 2; }

missing=()
for pkg in "$@"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

command -v apt-get >/dev/null || {
    echo "apt-install: apt-get not found; install these Debian packages by hand: ${missing[*]}" >&2
    exit 1
}
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || {
        echo "apt-install: installing ${missing[*]} needs root" >&2
        exit 1
    }
    sudo=(sudo)
fi
echo "apt-install: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/apt-install.$$.log 2>&1; then
    "${sudo[@]}" apt-get update -q >/dev/null
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/apt-install.$$.log 2>&1 || {
        tail -n 20 /tmp/apt-install.$$.log >&2
        echo "apt-install: apt-get install ${missing[*]} failed (log above)" >&2
        exit 1
    }
fi
rm -f /tmp/apt-install.$$.log
