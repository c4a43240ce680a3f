#!/usr/bin/env bash
# Installs Debian's `prometheus` package (the server and `promtool`) for the metrics
# integration test (crates/roam-cli/tests/prometheus.rs), unless both are already on PATH: a
# second run costs two `command -v`. The package's service is not started (scripts/apt-install.sh).
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    exit 0
fi
"$(dirname "$0")/apt-install.sh" prometheus
command -v prometheus >/dev/null && command -v promtool >/dev/null \
    || { echo "setup-prometheus: installed, but prometheus/promtool are not on PATH" >&2; exit 1; }
