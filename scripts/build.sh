#!/usr/bin/env bash
# Configures and builds Tracebook into build/ (or $TB_BUILD_DIR), after installing the
# Debian packages it needs. Extra arguments go to CMake, e.g. -DTB_SANITIZE=address,undefined.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
build=${TB_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
