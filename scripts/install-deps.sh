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
  gnuplot-nox          # the plots of `tracebook report` (its SVG terminal; no X11)
  chromium             # the report's browser test (headless: tests/experiments/test_report_browser.c)
  debootstrap          # gpu-check.sh --dry-build: a Debian root holding what the GPU image has
)

# Wanted, not needed: the build uses them when present and says what it does without them.
wanted=(
  libc6-dbg            # glibc's symbols: LeakSanitizer names its frames under mpirun (tests/lsan-mpirun.supp);
                       # without them CMake keeps the slower unwinder for those tests
)

missing=() missing_wanted=()
for p in "${packages[@]}" "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    if [[ " ${wanted[*]} " == *" $p "* ]]; then missing_wanted+=("$p"); else missing+=("$p"); fi
  fi
done

if [ ${#missing[@]} -eq 0 ] && [ ${#missing_wanted[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present (and ${wanted[*]})"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "install-deps: need root (or sudo) to install: ${missing[*]} ${missing_wanted[*]}" >&2
    [ ${#missing[@]} -eq 0 ] && exit 0  # only wanted ones: the build does without them
    exit 1
  fi
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get update -qq; then
  echo "install-deps: apt-get update failed" >&2
  [ ${#missing[@]} -eq 0 ] || exit 1
  echo "install-deps: ${missing_wanted[*]} not installed (wanted, not needed): the build goes on without" >&2
  exit 0
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ${#missing_wanted[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing_wanted[*]} (wanted, not needed)"
  $sudo apt-get install -y -qq --no-install-recommends "${missing_wanted[@]}" ||
    echo "install-deps: ${missing_wanted[*]} could not be installed (wanted, not needed): the build goes on" \
      "without (what each is for: scripts/install-deps.sh)" >&2
fi
