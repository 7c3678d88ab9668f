#!/usr/bin/env bash
# The main job: set up (packages, configure, build), then run the quickstart runbook — a few
# small configurations of the engine on the CPU, each run recorded with its provenance
# under artifacts/quickstart/v1/, a summary table, and claims — and prove every claim again
# from the raw files. `tracebook run` writes the experiment's HTML report
# (artifacts/quickstart/v1/report.html); its path is printed last, whatever prove says.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
build/bin/tracebook run runbooks/quickstart.lua "$@"
status=0
build/bin/tracebook prove --experiment quickstart || status=$?
echo "report: artifacts/quickstart/v1/report.html (open it in a browser; it needs no network)"
exit "$status"
