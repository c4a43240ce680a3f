#!/usr/bin/env bash
# Installs the Debian packages named on the command line that are not installed yet (the tests'
# system tools: Prometheus, Open MPI, Slurm, munge). Idempotent and quick when everything is
# present. Runs `apt-get update` only when the package lists lack a package. The packages'
# services are not started (a temporary policy-rc.d denies it): the tests run their own daemons
# on loopback. Needs root (or sudo) and apt-get, and says so, naming the packages, when either
# is missing.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 PACKAGE..." >&2; exit 2; }

missing=()
for pkg in "$@"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

command -v apt-get >/dev/null || {
    echo "apt-install: apt-get not found; install these Debian packages yourself: ${missing[*]}" >&2
    exit 1
}
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || {
        echo "apt-install: not root and no sudo: cannot install ${missing[*]}" >&2
        exit 1
    }
    sudo=(sudo)
fi
log=$(mktemp)
policy=/usr/sbin/policy-rc.d
added_policy=
cleanup() {
    rm -f "$log"
    if [ -n "$added_policy" ]; then "${sudo[@]}" rm -f "$policy"; fi
}
trap cleanup EXIT

echo "apt-install: installing ${missing[*]}" >&2
# Package lists may be missing (fresh containers): update once, only then.
for pkg in "${missing[@]}"; do
    if ! apt-cache show "$pkg" >/dev/null 2>&1; then
        "${sudo[@]}" apt-get update -qq >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
        break
    fi
done
# Exit code 101 from policy-rc.d means "action forbidden": the packages' daemons stay stopped.
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod +x "$policy"
    added_policy=1
fi
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >"$log" 2>&1 || {
    tail -n 30 "$log" >&2
    echo "apt-install: apt-get install ${missing[*]} failed (log above)" >&2
    exit 1
}
