#!/usr/bin/env bash
# How steady this host is over time (bench_host): an ALU loop, a memory stream and the
# core-to-core round trip between two pinned threads, each timed in ~100 ms chunks for
# SECONDS, with the host and its load. A timing claim can be no more precise than the drift
# printed here: on a VM whose memory system other tenants share the stream drifts while the
# ALU loop stays flat, and where the hypervisor moves the vCPUs the round trip changes several
# times over (so do steps that run two cooperating threads).
#
#   scripts/bench-host-drift.sh [SECONDS=20] [BUILD_DIR=build]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
build=${2:-build}
[ -x "$build/bin/bench_host" ] || { echo "bench-host-drift: no $build/bin/bench_host (build first)" >&2; exit 1; }
printf 'host: %s, %s usable cores; load average at start: %s; commit %s\n' \
  "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
  "$(git rev-parse --short HEAD 2>/dev/null || echo '?')"
"$build/bin/bench_host" "$seconds"
printf 'load average at end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
