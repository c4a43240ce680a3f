#!/usr/bin/env bash
# Installs Debian's `prometheus` package (the server and `promtool`) for the metrics
# integration test (crates/roam-cli/tests/metrics.rs), unless both are already on PATH: a
# second run costs two `command -v`. Needs root (or sudo) and apt-get; the package's service is
# not started (policy-rc.d denies it, and the test runs its own server on loopback).
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    exit 0
fi
command -v apt-get >/dev/null 2>&1 \
    || { echo "setup-prometheus: apt-get not found; install prometheus and promtool (Debian package 'prometheus') yourself" >&2; exit 1; }
sudo=()
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 \
        || { echo "setup-prometheus: not root and no sudo: cannot install Debian's prometheus" >&2; exit 1; }
    sudo=(sudo)
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "setup-prometheus: installing Debian's prometheus (server + promtool)"
# Package lists may be missing (fresh containers): update once, only then.
if ! apt-cache show prometheus >/dev/null 2>&1; then
    "${sudo[@]}" apt-get update -qq >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
fi
# exit code 101 from policy-rc.d: "action forbidden", so the package's daemon is not started.
policy=/usr/sbin/policy-rc.d
added_policy=
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod +x "$policy"
    added_policy=1
fi
status=0
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends prometheus \
    >"$log" 2>&1 || status=$?
if [ -n "$added_policy" ]; then "${sudo[@]}" rm -f "$policy"; fi
if [ "$status" != 0 ]; then cat "$log" >&2; exit "$status"; fi
command -v prometheus >/dev/null && command -v promtool >/dev/null \
    || { echo "setup-prometheus: installed, but prometheus/promtool are not on PATH" >&2; exit 1; }
