#!/usr/bin/env bash
# Installs the Debian packages Tracebook builds against (docs/ARCHITECTURE.md, "Parts and dependencies").
# Idempotent: packages already present are skipped, and `apt-get update` runs once,
# only when something must be installed. The CUDA toolkit is optional and not installed
# here; CMake finds it at its standard location when present.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenblas-openmp-dev  # sgemm for the engine's matmuls, threaded with OpenMP
  libjansson-dev       # JSON: config, metrics, traces, safetensors headers
  liblua5.4-dev        # runbook host
  libgit2-dev          # run provenance
  libclang-19-dev      # source indexer
  libsqlite3-dev       # catalogue and index storage
  libssl-dev           # SHA-256
  libopenmpi-dev openmpi-bin  # Open MPI: one process per rank (or group of rank threads) under mpirun; optional in CMake
  libc6-dbg            # glibc's symbols: LeakSanitizer names its frames under mpirun (tests/lsan-mpirun.supp)
  gnuplot-nox          # the plots of `tracebook report` (its SVG terminal; no X11)
  chromium             # the report's browser test (headless: tests/experiments/test_report_browser.c)
  debootstrap          # gpu-check.sh --dry-build: a Debian root holding what the GPU image has
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
