#!/usr/bin/env bash
# Configures and builds Tracebook into build/ (or $TB_BUILD_DIR), after installing the
# Debian packages it needs. Extra arguments go to CMake, e.g. -DTB_SANITIZE=address,undefined.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
build=${TB_BUILD_DIR:-build}
# CMake's file API answers queries present when it generates: ask for the code model up
# front so the first configure already says which sources link into which binary.
mkdir -p "$build/.cmake/api/v1/query" && touch "$build/.cmake/api/v1/query/codemodel-v2"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
